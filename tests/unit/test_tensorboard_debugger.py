"""hops' TensorBoard debugger calls say what replaces them instead of failing with AttributeError."""

import pytest

from hopsml import tensorboard
from hopsml.errors import HopsmlError


@pytest.mark.parametrize("call", [tensorboard.interactive_debugger, tensorboard.non_interactive_debugger])
def test_debugger_calls_name_their_tensorflow_2_replacement(call):
    with pytest.raises(tensorboard.DebuggerUnavailableError, match="enable_dump_debug_info") as info:
        call()
    assert isinstance(info.value, HopsmlError) and call.__name__ in str(info.value)
