"""The code blocks of README.md and docs/: found, run as a reader would run them, and their shown output compared.

A page's blocks run in page order in one Python process of their own (python blocks share one namespace; bash,
sh, shell and console blocks run in a shell from the same working folder), in a fresh HOPSML_ROOT, so a page
cannot lean on another page or on the machine's own project. A block that cannot run in every lane says so with an
HTML comment on the line before its fence, which a reader sees in the Markdown and the site hides:

    <!-- block: needs airflow -->          run by the airflow lane (tests/pipelines/test_doc_airflow_blocks.py)
    <!-- block: needs cluster: why -->     not run anywhere in CI: listed, with why (also s3, gpu, spark-connect)
    <!-- block: not run: why -->           not run: a sketch with placeholders, an install CI does itself, ...
    <!-- block: output -->                 this block is the stdout of the block before it, compared after NORMALIZE
    <!-- block: output, any order -->      the same, its lines compared as a sorted list (ranks print in any order)
    <!-- block: output, last lines -->      the same, compared with as many last lines of what the block printed
                                           (a library logging to stdout before it, as Airflow's dag.test() does)

Run as a script (`python tests/doc_blocks.py PAGE.json`) it is the page's process: it runs the blocks the JSON
lists and writes each block's stdout back into that JSON file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import getpass
import io
import json
import os
import re
import subprocess
import sys
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Generated from the code by docs/reference_pages.py and checked by tests/unit/test_reference_pages.py.
GENERATED = {"docs/reference.md", "docs/cli.md", "docs/settings.md"}
RUNNABLE = {"python", "bash", "sh", "shell", "console"}
# The lanes a block may need; a block marked with one of these is listed as not run everywhere but that lane.
NEEDS = {"airflow", "cluster", "s3", "gpu", "spark-connect"}
MARKER = re.compile(r"^<!--\s*block:\s*(?P<what>.*?)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+)(?P<info>[^`]*)$")
# Where the docs show what differs from run to run, the run's text is brought to the docs' form: each rule is a
# pattern and what it becomes, applied to the docs' text and the run's alike.
NORMALIZE = [
    (re.compile(r"\b(local|application)[-_][0-9_]+\b"), "<run id>"),
    (re.compile(r"\b\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?(\+00:00|Z)?"), "<time>"),
    (re.compile(r"\b\d+(\.\d+)?s\b"), "<seconds>"),
    (re.compile(r"127\.0\.0\.1:\d+"), "127.0.0.1:<port>"),
    (re.compile(r"[ \t]+"), " "),
]
DOCS_ROOT = "/home/you/hopsml"   # the root the docs' sample output shows
DOCS_USER = "you"


@dataclasses.dataclass
class Block:
    page: str
    line: int          # the line of the opening fence, from 1
    lang: str
    code: str
    marker: str = ""   # what the comment before the fence says, "" when none

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def needs(self) -> str:
        """The lane this block needs ("" when it runs in any), or "not run"."""
        if self.marker.startswith("needs "):
            return self.marker[len("needs "):].split(":")[0].strip()
        if self.marker.startswith("not run"):
            return "not run"
        return ""

    @property
    def reason(self) -> str:
        return self.marker.partition(":")[2].strip()

    @property
    def is_output(self) -> bool:
        return self.marker.startswith("output")


def pages() -> list[str]:
    """README.md and every page of docs/ but the generated ones, relative to the checkout."""
    found = ["README.md"] + sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").rglob("*.md"))
    return [p for p in found if p not in GENERATED]


def blocks(page: str) -> list[Block]:
    """The fenced blocks of a page, in order, each with the marker on the line before its fence."""
    lines = (REPO / page).read_text().split("\n")
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        if end == len(lines):
            raise ValueError(f"{page}:{i + 1}: a code fence that is never closed")
        marked = MARKER.match(lines[i - 1].strip()) if i > 0 else None
        code = "\n".join(line[indent:] for line in lines[i + 1:end]) + "\n"
        found.append(Block(page, i + 1, opening["info"].strip().split(" ")[0].lower(), code,
                           marked["what"] if marked else ""))
        i = end + 1
    return found


def check_markers(page_blocks: list[Block]) -> list[str]:
    """What is wrong with a page's markers: an unknown lane, a block not run without a reason, an output block
    with no runnable block before it, a runnable block that is neither run nor marked."""
    problems = []
    for index, block in enumerate(page_blocks):
        if block.is_output:
            before = page_blocks[index - 1] if index else None
            if before is None or before.lang not in RUNNABLE or (before.marker and before.needs not in NEEDS):
                problems.append(f"{block.where}: an output block must follow a block that runs here")
        elif block.needs == "not run" and not block.reason:
            problems.append(f"{block.where}: 'not run' needs a reason after a colon")
        elif block.needs and block.needs != "not run" and block.needs not in NEEDS:
            problems.append(f"{block.where}: needs {block.needs!r}: not a lane ({', '.join(sorted(NEEDS))})")
        elif block.needs in NEEDS - {"airflow"} and not block.reason:
            problems.append(f"{block.where}: needs {block.needs}: say why after a colon")
        elif block.marker and not block.needs:
            problems.append(f"{block.where}: unknown marker {block.marker!r}")
    return problems


def normalize(text: str, root: str = "", user: str = "") -> str:
    """The text with the volatile parts replaced by NORMALIZE's tokens, the run's root and user by the docs'."""
    if root:
        text = text.replace(root, DOCS_ROOT)
    if user and user != DOCS_USER:
        text = re.sub(rf"\b{re.escape(user)}\b", DOCS_USER, text)
    for pattern, token in NORMALIZE:
        text = pattern.sub(token, text)
    return "\n".join(line.rstrip() for line in text.strip("\n").split("\n"))


def compare(shown: str, printed: str, any_order: bool, root: str, last_lines: bool = False) -> str:
    """"" when the output the docs show is what ran, else a diff-like message."""
    want, got = normalize(shown), normalize(printed, root, getpass.getuser())
    if last_lines:
        got = "\n".join(got.split("\n")[-len(want.split("\n")):])
    if any_order:
        want, got = "\n".join(sorted(want.split("\n"))), "\n".join(sorted(got.split("\n")))
    if want == got:
        return ""
    diff = difflib.unified_diff(want.split("\n"), got.split("\n"), "shown in the docs", "printed", lineterm="")
    return "\n".join(diff)


def shell_commands(block: Block) -> str:
    """The commands of a shell block: a console block's lines after `$ ` (and their continuations), others whole."""
    if block.lang != "console":
        return block.code
    commands, continued = [], False
    for line in block.code.split("\n"):
        if line.startswith("$ ") or continued:
            commands.append(line[2:] if line.startswith("$ ") else line)
            continued = line.endswith("\\")
    return "\n".join(commands) + "\n"


def run_page(page: str, work: Path, lane: str = "", timeout: float = 1800) -> list[str]:
    """Run a page's blocks that this lane runs (lane "": the unmarked ones; "airflow": those and the airflow ones)
    in one process, in `work`; returns the failures (a block that failed, an output that differs)."""
    page_blocks = blocks(page)
    chosen = [b for b in page_blocks if b.lang in RUNNABLE and (not b.marker or (lane and b.needs == lane))]
    if not chosen:
        return []
    root, cwd = work / "root", work / "work"
    cwd.mkdir(parents=True, exist_ok=True)
    plan = work / "blocks.json"
    plan.write_text(json.dumps([dataclasses.asdict(b) | {"code": shell_commands(b) if b.lang != "python" else b.code}
                                for b in chosen]))
    # The page's folder is on the path, as for `python` started there with PYTHONPATH=$PWD: a module a page writes
    # imports by name, in the page's process and in Spark's workers.
    env = dict(os.environ, HOPSML_ROOT=str(root), HOPSML_PROJECT="demo", HOPSML_LOG_DIR=str(work / "logs"),
               PYTHONPATH=os.pathsep.join([str(cwd), str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
               PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]),   # `hopsml`
               MPLBACKEND="Agg")
    env.pop("HOPSML_CONF", None)
    done = subprocess.run([sys.executable, __file__, str(plan)], cwd=cwd, env=env, timeout=timeout,
                          capture_output=True, text=True)
    results = json.loads(plan.read_text())
    failures = [f"{r['page']}:{r['line']}: {r['error']}" for r in results if r.get("error")]
    if done.returncode and not failures:
        failures.append(f"{page}: the page's process ended with {done.returncode}:\n{done.stderr[-3000:]}")
    printed = {r["line"]: r.get("stdout", "") for r in results}
    for index, block in enumerate(page_blocks):
        if block.is_output and index and page_blocks[index - 1] in chosen:
            diff = compare(block.code, printed.get(page_blocks[index - 1].line, ""), "any order" in block.marker,
                           str(root), "last lines" in block.marker)
            if diff:
                failures.append(f"{block.where}: the output shown is not what the block before printed:\n{diff}")
    return failures


def _run_blocks(plan: Path) -> int:
    """The page's process: each block in order, python ones in one namespace, stdout kept per block."""
    results = json.loads(plan.read_text())
    namespace: dict = {"__name__": "__main__"}
    sys.path.insert(0, os.getcwd())
    status = 0
    for result in results:
        if status:
            result["error"] = "not run: a block before it failed"
            continue
        if result["lang"] == "python":
            captured = io.StringIO()
            try:
                with contextlib.redirect_stdout(captured):
                    exec(compile(result["code"], f"{result['page']}:{result['line']}", "exec"), namespace)
            except BaseException:   # noqa: BLE001 - a block's failure of any kind is the test's finding
                result["error"] = traceback.format_exc(limit=-8)
                status = 1
            result["stdout"] = captured.getvalue()
            sys.stdout.write(result["stdout"])
        else:
            sys.stdout.flush()
            done = subprocess.run(["bash", "-euo", "pipefail", "-c", result["code"]], capture_output=True, text=True)
            result["stdout"] = done.stdout
            if done.returncode:
                result["error"] = f"exit status {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
                status = 1
        plan.write_text(json.dumps(results))
    return status


if __name__ == "__main__":
    sys.exit(_run_blocks(Path(sys.argv[1])))
