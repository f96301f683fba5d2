"""The petastorm Unischema pickle hopsml writes without petastorm, and the promise not to import it."""

import importlib.util
import io
import pickle
import subprocess
import sys

import numpy as np
import pytest

from hopsml.data import unischema
from hopsml.data.images import unischema as image_unischema

pytestmark = pytest.mark.legacy
has_petastorm = importlib.util.find_spec("petastorm") is not None
SHAPE = (6, 5, 3)


class _Recorded:
    """Stands in for a class the pickle names: remembers its name and constructor arguments."""

    def __init__(self, name, *args):
        self.name, self.args = name, args

    def __eq__(self, other):
        return isinstance(other, _Recorded) and (self.name, self.args) == (other.name, other.args)

    def __repr__(self):
        return f"{self.name}{self.args}"


class _RecordingUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if module == "numpy":
            return getattr(np, name)
        return lambda *args: _Recorded(f"{module}.{name}", *args)


def _structure(data):
    return _RecordingUnpickler(io.BytesIO(data)).load()


def _call(name, *args):
    return _Recorded(name, *args)


def test_image_schema_pickle_names_petastorms_classes_and_constructor_arguments():
    loaded = _structure(image_unischema(SHAPE))
    scalar = "petastorm.codecs.ScalarCodec"
    field = "petastorm.unischema.UnischemaField"
    assert loaded == _call("petastorm.unischema.Unischema", "ImageSchema", [
        _call(field, "image", np.uint8, SHAPE, _call("petastorm.codecs.NdarrayCodec"), False),
        _call(field, "label", np.int32, (), _call(scalar, _call("pyspark.sql.types.IntegerType")), False),
        _call(field, "label_text", np.str_, (), _call(scalar, _call("pyspark.sql.types.StringType")), False),
        _call(field, "path", np.str_, (), _call(scalar, _call("pyspark.sql.types.StringType")), False),
    ])


def test_pickle_of_plain_values_round_trips():
    values = [None, True, False, 0, 255, 256, -1, 2 ** 31 - 1, -2 ** 31, "", "é" * 300, (), (1, "a"), [], [1, [2]]]
    assert pickle.loads(unischema.dumps(values)) == values
    with pytest.raises(ValueError, match="4-byte"):
        unischema.dumps(2 ** 31)
    with pytest.raises(TypeError, match="cannot pickle float"):
        unischema.dumps(1.5)
    with pytest.raises(ValueError, match="dtype 'complex64'"):
        unischema.Field("x", "complex64")


@pytest.mark.skipif(not has_petastorm, reason="petastorm is not installed (the petastorm extra)")
def test_petastorm_loads_it_as_the_schema_it_would_build_itself():
    from petastorm.codecs import NdarrayCodec, ScalarCodec
    from petastorm.etl.dataset_metadata import depickle_legacy_package_name_compatible
    from petastorm.unischema import Unischema, UnischemaField
    from pyspark.sql.types import IntegerType, StringType

    theirs = Unischema("ImageSchema", [
        UnischemaField("image", np.uint8, SHAPE, NdarrayCodec(), False),
        UnischemaField("label", np.int32, (), ScalarCodec(IntegerType()), False),
        UnischemaField("label_text", np.str_, (), ScalarCodec(StringType()), False),
        UnischemaField("path", np.str_, (), ScalarCodec(StringType()), False),
    ])
    ours = depickle_legacy_package_name_compatible(image_unischema(SHAPE))
    assert isinstance(ours, Unischema) and ours._name == theirs._name
    assert list(ours.fields) == list(theirs.fields)
    for name, field in ours.fields.items():
        other = theirs.fields[name]
        assert (field.numpy_dtype, field.shape, field.nullable) == (other.numpy_dtype, other.shape, other.nullable)
        assert type(field.codec) is type(other.codec)
        if isinstance(field.codec, ScalarCodec):
            assert field.codec.spark_dtype() == other.codec.spark_dtype()
    # the namedtuple petastorm builds rows from, and the codec round trip of a cell
    row = ours.make_namedtuple(image=np.zeros(SHAPE, np.uint8), label=1, label_text="1", path="p")
    assert row.label == 1
    cell = ours.fields["image"].codec.encode(ours.fields["image"], np.ones(SHAPE, np.uint8))
    np.testing.assert_array_equal(theirs.fields["image"].codec.decode(theirs.fields["image"], cell),
                                  np.ones(SHAPE, np.uint8))


def test_hopsml_never_imports_petastorm_unless_its_engine_is_asked_for():
    code = ("import sys, hopsml, hopsml.data, hopsml.data.images, hopsml.data.readers, hopsml.data.tables, "
            "hopsml.data.shards, hopsml.experiment, hopsml.cluster.session, hopsml.cli\n"
            "from hopsml.data.images import unischema\n"
            "unischema((4, 4, 3))\n"
            "print('petastorm' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.skipif(has_petastorm, reason="petastorm is installed")
def test_petastorm_engine_without_petastorm_says_how_to_install_it(root):
    from hopsml.data.readers import reader
    from hopsml.errors import SettingsError

    with pytest.raises(SettingsError, match=r"petastorm extra \(pip install \"\.\[petastorm\]\""):
        reader("anything", engine="petastorm")
