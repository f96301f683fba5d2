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
    assert '"state": "FINISHED"' in out and "experiment.json" in out
    assert cli.main(["experiments", "show", "nothere_3"]) == 1
    assert "no experiment 'nothere_3'" in capsys.readouterr().err
