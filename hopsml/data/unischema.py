"""petastorm's Unischema of an image dataset, pickled without importing petastorm.

``make_reader`` finds a dataset's schema in ``_common_metadata`` under petastorm's key, as a
pickled ``petastorm.unischema.Unischema``. hopsml writes that pickle on every stack, petastorm
installed or not, so a dataset written today reads with ``make_reader`` on a machine that has
the ``petastorm`` extra, and datasets are byte-for-byte the same layout either way.

The pickle (protocol 2) calls the constructors when it is loaded, never restores their
internals: ``Unischema(name, [UnischemaField(name, dtype, shape, codec, nullable), ...])``,
``NdarrayCodec()``, ``ScalarCodec(IntegerType())``. Loading it needs petastorm and pyspark,
as petastorm itself does; writing it needs neither.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

PROTOCOL = 2


@dataclass(frozen=True)
class Global:
    """A module-level name, as pickle's GLOBAL opcode refers to it."""

    module: str
    name: str


@dataclass(frozen=True)
class Call:
    """``func(*args)`` evaluated when the pickle is loaded (pickle's REDUCE)."""

    func: Global
    args: tuple[Any, ...] = ()


def _emit(value: object, out: bytearray) -> None:
    if isinstance(value, Global):
        out += b"c" + value.module.encode("ascii") + b"\n" + value.name.encode("ascii") + b"\n"
    elif isinstance(value, Call):
        _emit(value.func, out)
        _emit(tuple(value.args), out)
        out += b"R"
    elif value is None:
        out += b"N"
    elif value is True or value is False:
        out += b"\x88" if value else b"\x89"
    elif isinstance(value, int):
        if 0 <= value < 256:
            out += b"K" + bytes([value])
        elif -2 ** 31 <= value < 2 ** 31:
            out += b"J" + struct.pack("<i", value)
        else:
            raise ValueError(f"integer {value} does not fit a 4-byte pickle integer")
    elif isinstance(value, str):
        data = value.encode("utf-8")
        out += b"X" + struct.pack("<I", len(data)) + data
    elif isinstance(value, tuple):
        if not value:
            out += b")"
            return
        out += b"("
        for item in value:
            _emit(item, out)
        out += b"t"
    elif isinstance(value, list):
        out += b"]"
        if value:
            out += b"("
            for item in value:
                _emit(item, out)
            out += b"e"
    else:
        raise TypeError(f"cannot pickle {type(value).__name__} here: use Global, Call, None, bool, "
                        "int, str, tuple or list")


def dumps(value: object) -> bytes:
    """A protocol-2 pickle of ``value`` built from :class:`Global` / :class:`Call` and plain values."""
    out = bytearray(b"\x80" + bytes([PROTOCOL]))
    _emit(value, out)
    out += b"."
    return bytes(out)


_UNISCHEMA = Global("petastorm.unischema", "Unischema")
_FIELD = Global("petastorm.unischema", "UnischemaField")
_NDARRAY_CODEC = Call(Global("petastorm.codecs", "NdarrayCodec"))
# numpy names that are the same objects in numpy 1.x and 2.x
_DTYPES = {"uint8": "uint8", "int32": "int32", "int64": "int64", "float32": "float32",
           "float64": "float64", "str": "str_"}
_SPARK_TYPES = {"uint8": "ByteType", "int32": "IntegerType", "int64": "LongType",
                "float32": "FloatType", "float64": "DoubleType", "str": "StringType"}


@dataclass(frozen=True)
class Field:
    """One column of a petastorm dataset: a scalar (``shape == ()``) or a fixed-shape ndarray cell."""

    name: str
    dtype: str
    shape: tuple[int, ...] = ()
    nullable: bool = False

    def __post_init__(self) -> None:
        if self.dtype not in _DTYPES:
            raise ValueError(f"field {self.name!r}: dtype {self.dtype!r} is not one of {', '.join(_DTYPES)}")

    def pickled(self) -> Call:
        if self.shape:
            codec = _NDARRAY_CODEC
        else:
            codec = Call(Global("petastorm.codecs", "ScalarCodec"),
                         (Call(Global("pyspark.sql.types", _SPARK_TYPES[self.dtype])),))
        return Call(_FIELD, (self.name, Global("numpy", _DTYPES[self.dtype]),
                             tuple(int(n) for n in self.shape), codec, bool(self.nullable)))


def unischema_pickle(name: str, fields: Sequence[Field]) -> bytes:
    """The bytes petastorm stores under ``dataset-toolkit.unischema.v1``: ``Unischema(name, fields)``.

    >>> data = unischema_pickle("S", [Field("label", "int32")])
    >>> import pickletools; [arg for op, arg, _ in pickletools.genops(data) if op.name == "GLOBAL"]
    ['petastorm.unischema Unischema', 'petastorm.unischema UnischemaField', 'numpy int32', \
'petastorm.codecs ScalarCodec', 'pyspark.sql.types IntegerType']
    """
    return dumps(Call(_UNISCHEMA, (name, [field.pickled() for field in fields])))


def image_fields(shape: tuple[int, int, int]) -> list[Field]:
    """The fields of an image dataset: image (H, W, 3) uint8, label, label text, path."""
    return [Field("image", "uint8", tuple(shape)), Field("label", "int32"),
            Field("label_text", "str"), Field("path", "str")]
