"""The package index's `hopsml` is another project: nothing hopsml writes may send a user there, and the installed
distribution's name is the one hopsml reads its own version under."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

import hopsml
from hopsml import cli

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).parents[2]
# `pip install hopsml`, `pip install "hopsml[x]"`, `'hopsml[x]'`: the index's project, not this one.
TO_THE_INDEX = re.compile(r"""pip install\s+(--\S+\s+)*["']?hopsml(\[|["'\s]|$)|["']hopsml\[""")


def _texts():
    for folder, pattern in (("docs", "*.md"), ("hopsml", "*.py"), ("bench", "*.py"), ("spark_jobs", "*.py"),
                            ("notebooks", "*.ipynb"), (".", "README.md")):
        yield from (ROOT / folder).rglob(pattern) if folder != "." else [ROOT / pattern]


def test_no_doc_or_message_sends_users_to_the_index_for_hopsml():
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for path in _texts() for number, line in enumerate(path.read_text().splitlines(), 1)
             if TO_THE_INDEX.search(line)]
    assert found == []


def test_the_pattern_finds_what_it_is_for():
    assert TO_THE_INDEX.search('pip install "hopsml[airflow]"')
    assert TO_THE_INDEX.search("pip install hopsml")
    assert TO_THE_INDEX.search("pip install 'hopsml[onnx]'")
    assert not TO_THE_INDEX.search('pip install ".[airflow]"')
    assert not TO_THE_INDEX.search("pip install hopsml-platform")


def test_the_distribution_name_is_the_one_hopsml_reads_its_version_under():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == hopsml.DISTRIBUTION != "hopsml"
    own_extras = {req.split("[", 1)[0] for reqs in project["optional-dependencies"].values() for req in reqs
                  if req.startswith("hopsml")}
    assert own_extras <= {hopsml.DISTRIBUTION}, "an extra names another distribution than this one"


def test_version_flag_prints_the_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"hopsml {hopsml.__version__}"


def test_help_says_what_hopsml_is():
    text = subprocess.run([sys.executable, "-m", "hopsml.cli", "--help"], capture_output=True, text=True,
                          check=True).stdout
    assert "Spark-integrated ML pipelines" in text and "feature" in text
