"""Progress shown as a bar on a terminal and as a few whole lines anywhere else."""

import io
import warnings

from hopsml import progress


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_pipe_or_log_file_gets_lines_and_a_terminal_gets_a_bar():
    assert progress.display_kind(io.StringIO()) == "lines"
    assert progress.display_kind(_Tty()) == "terminal"


def test_lines_are_few_and_have_no_carriage_returns():
    out = io.StringIO()
    bar = progress.LineProgress(total=200, desc="prepare table 't'", unit="task", stream=out)
    for _ in range(200):
        bar.update()
    bar.close()
    text = out.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert [line.split(": ", 1)[1].split(" (")[0] for line in lines] == ["started", "25%", "50%", "75%", "done"]
    assert lines[-1].startswith("prepare table 't': done (200/200 tasks")


def test_lines_without_a_total_say_start_and_end_only():
    out = io.StringIO()
    bar = progress.LineProgress(total=None, desc="job", unit="task", stream=out)
    bar.n = 35
    bar.set_postfix(best="0.9")
    bar.close()
    assert out.getvalue().splitlines() == ["job: started"] + out.getvalue().splitlines()[1:]  # no "0 tasks"
    assert out.getvalue().splitlines()[-1].startswith("job: done (35 tasks, best=0.9")
    assert len(out.getvalue().splitlines()) == 2


def test_output_captured_by_pytest_is_not_a_terminal(capsys):
    bar = progress.progress_bar(total=4, desc="search trials", unit="trial")
    bar.n = 4
    bar.close()
    assert isinstance(bar, progress.LineProgress)
    assert "\r" not in capsys.readouterr().err


def test_a_notebook_without_ipywidgets_gets_lines_and_no_warning(monkeypatch):
    monkeypatch.setattr(progress, "_in_notebook", lambda: True)
    monkeypatch.setattr(progress.importlib.util, "find_spec", lambda name: None)
    assert progress.display_kind() == "lines"
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # tqdm's "IProgress not found" would be raised here
        progress.progress_bar(total=2, desc="x", disable=True).close()


def test_a_disabled_display_prints_nothing():
    out = io.StringIO()
    bar = progress.LineProgress(total=3, desc="x", disable=True, stream=out)
    bar.update(3)
    bar.close()
    assert out.getvalue() == ""
