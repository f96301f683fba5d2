import pytest

from hopsml import layout
from hopsml.errors import InvalidNameError


@pytest.mark.parametrize("bad", ["", "  ", "a/b", "..", "a..b", "x\\y", "."])
def test_unsafe_names_are_refused(bad):
    with pytest.raises(InvalidNameError):
        layout.validate_name(bad)


def test_experiment_paths_round_trip():
    exp = layout.ExperimentDir.of("p", "application_17_0003", 12)
    assert exp.id == "application_17_0003_12"
    assert layout.ExperimentDir.from_id("p", exp.id) == exp
    assert exp.program(".ipynb").endswith("/program.ipynb")
    with pytest.raises(InvalidNameError):
        exp.program(".sh")


def test_trial_names_are_safe_single_components():
    name = layout.trial_name({"lr": 0.1, "path": "../../etc", "opt": "a b"})
    assert "/" not in name and ".." not in name
    assert layout.validate_name(name) == name


def test_bad_experiment_id():
    with pytest.raises(InvalidNameError, match="app_id"):
        layout.parse_experiment_id("no-run-number")


def test_a_name_too_long_for_a_folder_is_refused_with_the_limit():
    from hopsml.errors import InvalidNameError
    from hopsml.layout import MAX_NAME_BYTES, validate_name

    assert validate_name("n" * MAX_NAME_BYTES) == "n" * MAX_NAME_BYTES
    with pytest.raises(InvalidNameError, match=f"at most {MAX_NAME_BYTES} bytes"):
        validate_name("n" * 300, "dataset name")
    with pytest.raises(InvalidNameError, match="bytes"):
        validate_name("é" * 101)  # 202 bytes in UTF-8


def test_a_trial_with_long_parameters_gets_a_folder_name_cut_to_the_limit():
    from hopsml.layout import MAX_NAME_BYTES, trial_name

    name = trial_name({"layers": "x" * 400, "lr": 0.1})
    assert name.startswith("layers=xxx") and len(name.encode("utf-8")) == MAX_NAME_BYTES
