"""The sample datasets the quickstart and train_torch.py --prepare-samples prepare: their source names the
bundled data set (not the temporary folder they passed through), and a second run reuses them."""

from hopsml import cli, config
from hopsml.data import commands as data_commands


def test_a_sample_is_prepared_once_named_by_its_source_and_then_reused(spark, root, tmp_path, capsys):
    settings = config.load()
    first = data_commands.prepare_sample(settings, str(tmp_path / "one"), "digits", limit=60)
    assert "dataset 'digits'" in first and "reused" not in first
    manifest = (root / "Projects" / "test" / "Datasets" / "digits" / "dataset.json").read_text()
    assert '"source": "hopsml-sample:digits?limit=60"' in manifest
    assert cli.main(["datasets", "list"]) == 0
    row = capsys.readouterr().out.splitlines()[1]
    assert row.startswith("digits") and row.rstrip().endswith("hopsml-sample:digits?limit=60")
    again = data_commands.prepare_sample(settings, str(tmp_path / "two"), "digits", limit=60)
    assert again.endswith("is there already: reused") and not (tmp_path / "two").exists()
    assert (root / "Projects" / "test" / "Datasets" / "digits" / "dataset.json").read_text() == manifest
