"""The docs' block runner's rules (tests/doc_blocks.py): what counts as a marker, what is compared and how."""

from doc_blocks import Block, check_markers, compare, normalize, shell_commands


def test_volatile_parts_are_blanked_and_nothing_else():
    run = "run local-1796681462691_2 at 2026-12-07 22:12:29 took 24.0s on 127.0.0.1:40211"
    assert normalize(run) == "run <run id> at <time> took <seconds> on 127.0.0.1:<port>"
    assert normalize("accuracy 0.9444") == "accuracy 0.9444"


def test_a_different_output_fails_and_the_same_passes():
    assert compare("accuracy 0.91\n", "accuracy 0.86\n", False, "/tmp/r") != ""
    assert compare("under /home/you/hopsml\n", "under /tmp/r\n", False, "/tmp/r") == ""
    assert compare("a\nb\n", "b\na\n", True, "/tmp/r") == "" and compare("a\nb\n", "b\na\n", False, "/tmp/r")
    assert compare("DAG run: success\n", "log line\nDAG run: success\n", False, "/tmp/r", last_lines=True) == ""


def test_markers_must_be_known_and_say_why():
    run = Block("p.md", 1, "python", "print(1)\n")
    assert check_markers([run, Block("p.md", 5, "text", "1\n", "output")]) == []
    assert check_markers([Block("p.md", 1, "bash", "x\n", "not run")])            # no reason
    assert check_markers([Block("p.md", 1, "bash", "x\n", "needs mainframe: why")])   # no such lane
    assert check_markers([Block("p.md", 1, "text", "1\n", "output")])              # output of nothing
    assert check_markers([Block("p.md", 1, "bash", "x\n", "skip")])                # not a marker


def test_a_console_block_runs_its_dollar_lines_only():
    block = Block("p.md", 1, "console", "$ echo a \\\n  b\na b\n$ true\n")
    assert shell_commands(block) == "echo a \\\n  b\ntrue\n"
