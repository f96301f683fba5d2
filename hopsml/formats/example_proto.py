"""The tf.train.Example message classes, built with protobuf from TensorFlow's public schema.

The schema below is the wire contract of TensorFlow's ``example.proto`` and ``feature.proto``
(package ``tensorflow``); field numbers and packing are what make the bytes compatible::

    message BytesList { repeated bytes value = 1; }
    message FloatList { repeated float value = 1 [packed = true]; }
    message Int64List { repeated int64 value = 1 [packed = true]; }
    message Feature {
      oneof kind { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; }
    }
    message Features { map<string, Feature> feature = 1; }
    message Example { Features features = 1; }

The descriptors are built at import time instead of checking in protoc output: generated
modules pin the protobuf runtime to protoc's major version, and this way any protobuf >= 4.21
works. They live in a private descriptor pool so that importing TensorFlow in the same process
(which registers ``tensorflow.Example`` in the default pool) never conflicts.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool

__all__ = ["BytesList", "Example", "Feature", "Features", "FloatList", "Int64List"]

_PACKAGE = "tensorflow"
_FILE_NAME = "hopsml/formats/tensorflow_example.proto"


def _file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    """Describe the six messages of the Example schema as a FileDescriptorProto."""
    fdp = descriptor_pb2.FileDescriptorProto(name=_FILE_NAME, package=_PACKAGE, syntax="proto3")
    fd = descriptor_pb2.FieldDescriptorProto
    repeated, optional = fd.LABEL_REPEATED, fd.LABEL_OPTIONAL

    def message(name: str, *fields: dict) -> descriptor_pb2.DescriptorProto:
        msg = fdp.message_type.add(name=name)
        for spec in fields:
            msg.field.add(**spec)
        return msg

    message("BytesList", dict(name="value", number=1, label=repeated, type=fd.TYPE_BYTES))
    packed = descriptor_pb2.FieldOptions(packed=True)
    message("FloatList", dict(name="value", number=1, label=repeated, type=fd.TYPE_FLOAT,
                              options=packed))
    message("Int64List", dict(name="value", number=1, label=repeated, type=fd.TYPE_INT64,
                              options=packed))
    feature = message(
        "Feature",
        *[dict(name=name, number=number, label=optional, type=fd.TYPE_MESSAGE,
               type_name=f".{_PACKAGE}.{kind}", oneof_index=0)
          for number, (name, kind) in enumerate(
              [("bytes_list", "BytesList"), ("float_list", "FloatList"),
               ("int64_list", "Int64List")], start=1)])
    feature.oneof_decl.add(name="kind")

    features = message("Features", dict(name="feature", number=1, label=repeated,
                                        type=fd.TYPE_MESSAGE,
                                        type_name=f".{_PACKAGE}.Features.FeatureEntry"))
    entry = features.nested_type.add(name="FeatureEntry")
    entry.field.add(name="key", number=1, label=optional, type=fd.TYPE_STRING)
    entry.field.add(name="value", number=2, label=optional, type=fd.TYPE_MESSAGE,
                    type_name=f".{_PACKAGE}.Feature")
    entry.options.map_entry = True

    message("Example", dict(name="features", number=1, label=optional, type=fd.TYPE_MESSAGE,
                            type_name=f".{_PACKAGE}.Features"))
    return fdp


def _message_classes() -> dict[str, Any]:
    """Register the schema in a private pool and return its message classes by name."""
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(_file_descriptor().SerializeToString())
    try:
        from google.protobuf.message_factory import GetMessageClass
    except ImportError:  # protobuf < 4.22
        from google.protobuf.message_factory import MessageFactory
        GetMessageClass = MessageFactory(pool).GetPrototype  # noqa: N806
    return {name: GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}"))
            for name in __all__}


_CLASSES = _message_classes()
BytesList = _CLASSES["BytesList"]
FloatList = _CLASSES["FloatList"]
Int64List = _CLASSES["Int64List"]
Feature = _CLASSES["Feature"]
Features = _CLASSES["Features"]
Example = _CLASSES["Example"]
