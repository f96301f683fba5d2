"""hsfs.feature.Feature: a feature of a group, and the comparisons that make filters. Built with hsfs' arguments
(`Feature(name="amount", type="double", online_type=..., description=...)`): those hopsml has no use for
(foreign, hudi_precombine_key, default_value, ...) are kept on the object, unused."""

from __future__ import annotations

from hopsml.featurestore.query import Feature as _Feature


class _AnyFeature(type):
    """Every hopsml Feature (`fg.amount` too) is an instance of hsfs.feature.Feature, as in hsfs."""

    def __instancecheck__(cls, instance: object) -> bool:
        return isinstance(instance, _Feature)


class Feature(_Feature, metaclass=_AnyFeature):
    """hopsml's Feature under hsfs' constructor."""

    def __init__(self, name: str, type: str | None = None, description: str | None = None,  # noqa: A002
                 primary: bool = False, foreign: bool = False, partition: bool = False,
                 hudi_precombine_key: bool = False, online_type: str | None = None, default_value: str | None = None,
                 feature_group_id: int | None = None, feature_group: object = None, on_demand: bool = False,
                 use_fully_qualified_name: bool = False, **kwargs: object) -> None:
        super().__init__(name.lower(), type or "", description or "", primary, False,
                         getattr(feature_group, "key", "") or "")
        for key, value in {"foreign": foreign, "partition": partition, "online_type": online_type,
                           "default_value": default_value, "on_demand": on_demand}.items():
            object.__setattr__(self, key, value)


__all__ = ["Feature"]
