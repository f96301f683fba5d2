"""A fitted transformation function's statistics read as hsfs 4 gives them: by the function's argument name.

The churn tutorial's batch inference turns transformed columns back into their values with
`udf.transformation_statistics.feature.max` / `.feature.min` (min_max_scaler) and `.feature.unique_values`
(label_encoder): the built-ins' argument is called `feature`, whatever feature they are bound to.
"""

import pandas as pd
import pytest

from hopsml.featurestore.transformations import label_encoder, min_max_scaler, udf

FRAME = pd.DataFrame({"tenure": [1.0, 12.0, 72.0, None], "contract": ["Two year", "Month-to-month", "One year",
                                                                    "Month-to-month"]})


def test_builtin_statistics_are_read_by_the_argument_name_and_invert_the_transformation():
    scaler = min_max_scaler("tenure").fit(FRAME)
    udf_view = scaler.hopsworks_udf
    stats = udf_view.transformation_statistics
    assert (stats.feature.feature_name, stats.feature.min, stats.feature.max) == ("tenure", 1.0, 72.0)
    assert (stats.feature.count, stats.feature.num_null_values, stats.feature.num_non_null_values) == (4, 1, 3)
    scaled = scaler.apply(FRAME)[udf_view.output_column_names[0]]
    restored = scaled.map(lambda x: x * (stats.feature.max - stats.feature.min) + stats.feature.min)
    assert restored.iloc[:3].tolist() == pytest.approx([1.0, 12.0, 72.0])

    encoder = label_encoder("contract").fit(FRAME)
    values = encoder.hopsworks_udf.transformation_statistics.feature.unique_values
    index_to_value = dict(enumerate(sorted(values)))
    codes = encoder.apply(FRAME)["label_encoder_contract_"]
    assert codes.map(index_to_value).tolist() == FRAME["contract"].tolist()
    assert encoder.transformation_statistics["contract"]["unique_values"] == sorted(set(FRAME["contract"]))


def test_a_user_function_reads_its_statistics_by_its_own_argument_name():
    @udf(float, drop=["x"])
    def scaled(x, statistics=None):
        return x / statistics.x.max

    fitted = scaled("tenure").fit(FRAME)
    assert fitted.apply(FRAME)["scaled_tenure_"].iloc[2] == pytest.approx(1.0)
    assert fitted.transformation_statistics.x.feature_name == "tenure"
    with pytest.raises(AttributeError, match="arguments are x"):
        fitted.transformation_statistics.nope  # noqa: B018


def test_before_fitting_the_statistics_are_empty_not_missing():
    stats = min_max_scaler("tenure").transformation_statistics
    assert stats.feature.feature_name == "tenure" and stats.feature.max is None
