from hopsml import cli, experiment


def test_list_and_show(spark, root, capsys):
    logdir, _ = experiment.launch(lambda lr: {"metric": lr * 2}, {"lr": 0.25}, name="listed")
    exp_id = logdir.rsplit("/", 1)[-1]
    assert cli.main(["experiments", "list"]) == 0
    out = capsys.readouterr().out
    header, row = out.splitlines()[:2]
    assert header.split()[:6] == ["ID", "USER", "NAME", "START", "FINISHED", "STATUS"]
    assert row.startswith(exp_id) and "listed" in row and "FINISHED" in row and "lr=0.25" in row
    assert cli.main(["experiments", "list", "--state", "failed"]) == 0
    assert "no experiments" in capsys.readouterr().out
    assert cli.main(["experiments", "show", exp_id]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"experiment {exp_id}: listed (FINISHED)") and "experiment.json" in out
    assert cli.main(["experiments", "show", "nothere_3"]) == 1
    assert "no experiment 'nothere_3'" in capsys.readouterr().err


def test_prep_and_datasets_commands(spark, root, tmp_path, capsys):
    from hopsml.data import samples

    csv = tmp_path / "iris.csv"
    samples.write_table(str(csv))
    assert cli.main(["prep", "tabular", str(csv), "flowers", "--label", "species"]) == 0
    assert "dataset 'flowers'" in capsys.readouterr().out
    assert cli.main(["datasets", "list"]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert listing[0].split()[:2] == ["NAME", "KIND"] and listing[1].startswith("flowers")
    assert cli.main(["datasets", "show", "flowers"]) == 0
    assert "statistics" in capsys.readouterr().out
    assert cli.main(["datasets", "show", "nothing"]) == 1


def test_show_lists_the_trials_of_a_search_best_first(spark, root, capsys):
    logdir, _, _ = experiment.grid_search(lambda x: {"metric": x * 10}, {"x": [1, 3, 2]}, name="s")
    assert cli.main(["experiments", "show", logdir.rsplit("/", 1)[-1]]) == 0
    out = capsys.readouterr().out
    table = out[out.index("trials, best first:"):].splitlines()[1:5]
    assert table[0].split()[:3] == ["TRIAL", "STATE", "METRIC"]
    assert [row.split()[0] for row in table[1:]] == ["x=3", "x=2", "x=1"]


def _diverges_at_two(x):
    if x == 2:
        raise ValueError("the loss diverged at x=2")
    return {"metric": x * 10}


def test_show_lists_a_failed_trial_with_its_reason(spark, root, capsys):
    from hopsml.errors import HopsmlError

    try:
        logdir, _, _ = experiment.grid_search(_diverges_at_two, {"x": [1, 2, 3]}, name="failing")
    except HopsmlError:
        logdir = None
    exp_id = logdir.rsplit("/", 1)[-1] if logdir else _newest_id(capsys)
    assert cli.main(["experiments", "show", exp_id]) == 0
    out = capsys.readouterr().out
    table = out[out.index("trials, best first:"):]
    assert any(row.split()[:2] == ["x=2", "FAILED"] for row in table.splitlines())
    failed = [line for line in table.splitlines() if line.startswith("  x=2: FAILED: ")]
    assert len(failed) == 1 and "the loss diverged at x=2" in failed[0]


def _newest_id(capsys) -> str:
    capsys.readouterr()
    assert cli.main(["experiments", "list"]) == 0
    return capsys.readouterr().out.splitlines()[1].split()[0]


def test_prep_tabular_of_only_rejected_rows_exits_non_zero(spark, root, tmp_path, capsys):
    csv = tmp_path / "bad.csv"
    csv.write_text("a preamble line\n1,2,x\n3,4,y\n")
    assert cli.main(["prep", "tabular", str(csv), "bad", "--label", "a preamble line"]) == 1
    err = capsys.readouterr().err
    assert "all 2 rows" in err and "--skip-rows" in err
    assert cli.main(["datasets", "show", "bad"]) == 1


def test_samples_prepared_again_are_the_same_bytes_so_earlier_runs_stay_rerunnable(spark, root):
    """The quickstart's samples folder is the same each time (the image records keep each file's path), so
    `hopsml quickstart --overwrite` prepares the same dataset fingerprints, and is gone afterwards."""
    import json
    import os

    from hopsml import config
    from hopsml.data import commands

    settings = config.load()
    prints = []
    for _ in range(2):
        with cli.samples_folder(settings) as workdir:
            commands.prepare_samples(settings, workdir, limit=40, overwrite=True)
        prints.append({name: json.loads((root / "Projects" / "test" / "Datasets" / name / "dataset.json")
                                        .read_text())["fingerprints"]["dataset"] for name in ("digits", "iris")})
    assert prints[0] == prints[1]
    assert not os.path.exists(workdir)
