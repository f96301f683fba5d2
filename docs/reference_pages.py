"""The reference made from the code: the settings table (docs/settings.md), every command and flag of `hopsml`
(docs/cli.md, from its argument parsers) and the public Python API (docs/reference.md, from docstrings). Each
page keeps its generated part between markers and is checked in, so the repository shows it too;
tests/unit/test_reference_pages.py fails when one differs from what the code gives.

    python docs/reference_pages.py            # rewrite the generated parts of the three pages
    python docs/reference_pages.py --check    # only say which are stale (exit 1)
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parent
if str(DOCS.parent) not in sys.path:  # run as a script: this checkout's hopsml, not an installed one
    sys.path.insert(0, str(DOCS.parent))

from hopsml import cli, config  # noqa: E402

COMMAND = "python docs/reference_pages.py"

# The public faces, as a reader meets them: (heading, what it is, modules, classes reached through the face).
FACES: list[tuple[str, str, list[str], list[str]]] = [
    ("The hops face",
     "hops' modules with hops' names and parameters ([Moving from hops](hops.md) says where they differ).",
     ["hopsml.experiment", "hopsml.hdfs", "hopsml.tensorboard", "hopsml.devices", "hopsml.util", "hopsml.model",
      "hopsml.serving", "hopsml.numpy_helper", "hopsml.pandas_helper"],
     []),
    ("The hopsworks face",
     "`from hopsml import hopsworks`: the hopsworks SDK's names (hopsworks, hsfs, hsml), and the classes its "
     "calls return ([Feature store](featurestore.md), [Models and serving](serving.md)).",
     ["hopsml.hopsworks", "hopsml.hopsworks.hsfs", "hopsml.hopsworks.hsfs.builtin_transformations",
      "hopsml.hopsworks.hsml.schema", "hopsml.hopsworks.hsml.model_schema", "hopsml.hopsworks.hsml.transformer",
      "hopsml.featurestore"],
     ["hopsml.hopsworks.datasets.DatasetApi", "hopsml.hopsworks.jobs.JobApi", "hopsml.hopsworks.jobs.Job",
      "hopsml.featurestore.store.FeatureStore", "hopsml.featurestore.group.FeatureGroup",
      "hopsml.featurestore.view.FeatureView",
      "hopsml.featurestore.transformations.TransformationFunction", "hopsml.hopsworks.registry.ModelRegistry",
      "hopsml.hopsworks.registry.Model", "hopsml.hopsworks.deployments.ModelServing",
      "hopsml.hopsworks.deployments.Deployment", "hopsml.hopsworks.deployments.Predictor"]),
    ("hopsml's own verbs",
     "What hopsml adds: data preparation and readers, the collective between ranks, PyTorch on the ranks, "
     "checkpoints, timelines, the run catalog and jobs.",
     ["hopsml.data", "hopsml.collective", "hopsml.torch", "hopsml.checkpoint", "hopsml.timeline",
      "hopsml.experiments", "hopsml.jobs"],
     []),
]


# --- the markers ------------------------------------------------------------------------------------------------
def begin(name: str) -> str:
    """The line that opens a page's generated part."""
    return f"<!-- begin generated {name}: {COMMAND} rewrites it, do not edit by hand -->"


def end(name: str) -> str:
    """The line that closes a page's generated part."""
    return f"<!-- end generated {name} -->"


def replace(text: str, name: str, body: str) -> str:
    """The page's text with the part between the markers of `name` replaced by `body`."""
    start, stop = begin(name), end(name)
    if text.count(start) != 1 or text.count(stop) != 1 or text.index(start) > text.index(stop):
        raise ValueError(f"the page needs one line {start!r} and, below it, one line {stop!r}")
    head, rest = text.split(start, 1)
    return f"{head}{start}\n\n{body.strip()}\n\n{stop}{rest.split(stop, 1)[1]}"


def _cell(text: str) -> str:
    """Text in a Markdown table's cell: `<` would start HTML, `|` a new cell."""
    return text.replace("<", "&lt;").replace("|", "&#124;").replace("\n", " ")


# --- the command line -------------------------------------------------------------------------------------------
def commands(parser: argparse.ArgumentParser | None = None,
             path: tuple[str, ...] = ("hopsml",), text: str | None = None,
             ) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser, str | None]]:
    """Every command's words, its parser and its help, depth first from `hopsml` itself."""
    parser = parser or cli._parser()
    yield path, parser, text if text is not None else parser.description
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            seen: set[int] = set()
            for name, sub in action.choices.items():
                if id(sub) not in seen:
                    seen.add(id(sub))
                    yield from commands(sub, (*path, name), helps.get(name))


def arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """A parser's own arguments as a user passes them: not -h, not the subcommand slot, not hidden ones."""
    return [a for a in parser._actions if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))
            and a.help != argparse.SUPPRESS]


def missing_help() -> list[str]:
    """Every command and argument whose --help would say nothing about it, as `hopsml ... --flag`."""
    found = []
    for path, parser, text in commands():
        if not text:
            found.append(" ".join(path))
        found += [f"{' '.join(path)} {_invocation(a)}" for a in arguments(parser) if not a.help]
    return found


def _metavar(action: argparse.Action) -> str:
    if action.metavar is not None:
        return str(action.metavar)
    if action.choices is not None:
        return "{" + ",".join(str(c) for c in action.choices) + "}"
    return action.dest if not action.option_strings else action.dest.upper()


def _invocation(action: argparse.Action) -> str:
    """How a user writes the argument: `--name NAME`, `-o, --output OUTPUT`, `ids ...`."""
    var = _metavar(action)
    forms = {"?": f"[{var}]", "*": f"[{var} ...]", "+": f"{var} [...]"}
    value = forms.get(action.nargs, var) if isinstance(action.nargs, str) else var
    if not action.option_strings:
        return value
    flags = ", ".join(action.option_strings)
    return flags if action.nargs == 0 else f"{flags} {value}"


def _default(action: argparse.Action) -> str:
    default = action.default
    if default is None or default == argparse.SUPPRESS or action.nargs == 0 or default == []:
        return ""
    return f"`{default}`"


def _help(action: argparse.Action, prog: str) -> str:
    """The help as --help prints it: argparse's %(default)s and the like filled in."""
    text = action.help or ""
    if "%" in text:
        params = {k: v for k, v in vars(action).items() if v is not argparse.SUPPRESS}
        text = text % {**params, "prog": prog}
    return text + (" (required)" if action.required and action.option_strings else "")


def cli_markdown() -> str:
    """docs/cli.md's generated part: a section per command, a table of its arguments."""
    out = []
    for path, parser, text in commands():
        level = "#" * min(len(path) + 1, 4)
        out += [f"{level} `{' '.join(path)}`", ""]
        if text:
            out += [" ".join(text.split()).replace("<", "&lt;"), ""]
        rows = arguments(parser)
        if rows:
            out += ["| argument | default | what it does |", "|---|---|---|"]
            out += [f"| `{_cell(_invocation(a))}` | {_cell(_default(a))} | {_cell(_help(a, parser.prog))} |"
                    for a in rows]
            out.append("")
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if subs:
            names = ", ".join(f"`{n}`" for n in dict.fromkeys(subs[0].choices))
            out += [f"Commands: {names}.", ""]
    return "\n".join(out)


# --- the Python API ---------------------------------------------------------------------------------------------
class _Shown:
    """A signature's annotation or default as the source writes it (no quotes around a postponed annotation,
    no memory address that would change the page on every run)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _shown_default(value: Any) -> _Shown:
    text = repr(value)
    return _Shown(re.sub(r" at 0x[0-9a-f]+", "", text))


def signature(obj: Any, name: str, method: bool = False) -> str:
    """`name(params) -> result`, annotations as written, one parameter a line when it is long; a method's `self`
    left out."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return f"{name}(...)"
    params = list(sig.parameters.values())[1 if method else 0:]
    parts, kinds = [], [p.kind for p in params]
    for i, p in enumerate(params):
        if i and kinds[i - 1] == p.POSITIONAL_ONLY and p.kind != p.POSITIONAL_ONLY:
            parts.append("/")
        if p.kind == p.KEYWORD_ONLY and p.VAR_POSITIONAL not in kinds and p.KEYWORD_ONLY not in kinds[:i]:
            parts.append("*")
        parts.append(str(p.replace(
            annotation=p.annotation if p.annotation is p.empty else _Shown(_annotation(p.annotation)),
            default=p.default if p.default is p.empty else _shown_default(p.default))))
    if kinds and kinds[-1] == inspect.Parameter.POSITIONAL_ONLY:
        parts.append("/")
    shown = sig.return_annotation is not sig.empty and not inspect.isclass(obj)
    result = f" -> {_annotation(sig.return_annotation)}" if shown else ""
    one_line = f"{name}({', '.join(parts)}){result}"
    if len(one_line) <= 100:
        return one_line
    return f"{name}(\n" + "".join(f"    {part},\n" for part in parts) + f"){result}"


def _annotation(value: Any) -> str:
    if isinstance(value, str):
        return value
    return inspect.formatannotation(value)


def docstring(obj: Any) -> str:
    """The object's own docstring, '' where it has none (a dataclass's made-up `Name(field, ...)` counts as
    none)."""
    doc = inspect.getdoc(obj) or ""
    if inspect.isclass(obj) and doc.startswith(f"{obj.__name__}("):
        return ""
    return doc


def first_paragraph(doc: str) -> str:
    """A docstring's first paragraph on one line, Sphinx roles as plain code, `<` safe for Markdown."""
    text = " ".join(doc.strip().split("\n\n", 1)[0].split())
    text = re.sub(r":(?:func|meth|class|mod|attr|data|exc|obj):`~?([^`]+)`", r"`\1`", text)
    spans = re.split(r"(`+[^`]*`+)", text)   # in a code span `<` is shown as it is
    return "".join(span if span.startswith("`") else span.replace("<", "&lt;") for span in spans)


def module_members(module_name: str) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
    """The module's public functions and classes: those in its `__all__`, else those it defines itself."""
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n, v in vars(module).items() if not n.startswith("_")
                 and (inspect.isfunction(v) or inspect.isclass(v)) and v.__module__ == module_name]
    values = [(n, getattr(module, n)) for n in sorted(names)]
    functions = [(n, v) for n, v in values if callable(v) and not inspect.isclass(v)]
    classes = [(n, v) for n, v in values if inspect.isclass(v)]
    return functions, classes


def class_members(cls: type) -> list[tuple[str, str, Any]]:
    """(name, kind, object) of a class's public methods and properties, also those its hopsml bases give it."""
    found: dict[str, tuple[str, Any]] = {}
    if issubclass(cls, BaseException):
        return []
    for klass in cls.__mro__:
        if not klass.__module__.startswith("hopsml"):
            continue
        for name, value in vars(klass).items():
            if name.startswith("_") or name in found:
                continue
            if isinstance(value, property):
                found[name] = ("property", value)
            elif isinstance(value, (staticmethod, classmethod)):
                found[name] = (type(value).__name__, getattr(cls, name))
            elif inspect.isfunction(value):
                found[name] = ("method", value)
    order = sorted(found.items(), key=lambda item: (item[1][0] == "property", item[0]))  # methods, then properties
    return [(name, kind, value) for name, (kind, value) in order]


def _resolve(dotted: str) -> type:
    module, _, name = dotted.rpartition(".")
    found: type = getattr(importlib.import_module(module), name)
    return found


def public_api() -> Iterator[tuple[str, str, Any, str]]:
    """(face heading, qualified name, object, kind) of everything the reference shows: module, function, class,
    method, property, classmethod, staticmethod."""
    for heading, _, modules, classes in FACES:
        for module_name in modules:   # each module: its functions, then its classes
            yield heading, module_name, importlib.import_module(module_name), "module"
            functions, members = module_members(module_name)
            for name, value in functions:
                yield heading, f"{module_name}.{name}", value, "function"
            for name, cls in members:
                yield from _class(heading, f"{module_name}.{name}", cls)
        for dotted in classes:
            yield from _class(heading, dotted, _resolve(dotted))


def _class(heading: str, dotted: str, cls: type) -> Iterator[tuple[str, str, Any, str]]:
    yield heading, dotted, cls, "class"
    for name, kind, value in class_members(cls):
        yield heading, f"{dotted}.{name}", value, kind


def missing_docstrings() -> list[str]:
    """The qualified names of every public module, function, class and method of the faces without a docstring
    (a property may go without: its name and type usually say it)."""
    return [name for _, name, value, kind in public_api() if kind != "property" and not docstring(value)]


def api_markdown() -> str:
    """docs/reference.md's generated part: per face, per module and class, each signature with its docstring's
    first paragraph; a class's properties in one list below its methods."""
    intro = {heading: text for heading, text, _, _ in FACES}
    out: list[str] = []
    face = None
    properties: list[str] = []
    for heading, dotted, value, kind in public_api():
        if properties and kind != "property":
            out += [*properties, ""]
            properties = []
        if heading != face:
            face = heading
            out += [f"## {heading}", "", intro[heading], ""]
        short = dotted.rpartition(".")[2]
        if kind == "property":
            text = first_paragraph(docstring(value.fget))
            properties += [f"- `{short}`" + (f": {text}" if text else "")]
            if len(properties) == 1:
                properties.insert(0, "Properties:\n")
            continue
        if kind in ("module", "class"):
            out += [f"### `{dotted}`", ""]
            if kind == "class":
                shown = f"class {short}" if issubclass(value, BaseException) else "class " + signature(value, short)
                out += ["```python", shown, "```", ""]
        else:
            owner = dotted.rsplit(".", 2)[-2]
            out += [f"#### `{short if kind == 'function' else f'{owner}.{short}'}`", ""]
            prefix = f"@{kind}\n" if kind in ("classmethod", "staticmethod") else ""
            out += ["```python", prefix + signature(value, short, method=kind == "method"), "```", ""]
        out += [first_paragraph(docstring(value)) or "(no docstring)", ""]
    if properties:
        out += [*properties, ""]
    return "\n".join(out)


# --- the pages --------------------------------------------------------------------------------------------------
PAGES: dict[str, dict[str, Callable[[], str]]] = {
    "settings.md": {"settings": config.settings_markdown},
    "cli.md": {"cli": cli_markdown},
    "reference.md": {"api": api_markdown},
}


def generated(page: str, text: str | None = None) -> str:
    """The page's text with every generated part made again from the code."""
    text = (DOCS / page).read_text(encoding="utf-8") if text is None else text
    for name, make in PAGES[page].items():
        text = replace(text, name, make())
    return text


def stale() -> list[str]:
    """The pages whose checked-in generated part differs from what the code gives now."""
    return [page for page in PAGES if generated(page) != (DOCS / page).read_text(encoding="utf-8")]


def main(argv: list[str] | None = None) -> int:
    """Rewrite the generated parts (or, with --check, only name the stale pages)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page is stale")
    args = parser.parse_args(argv)
    if args.check:
        pages = stale()
        for page in pages:
            print(f"docs/{page} is stale: run {COMMAND}")
        return 1 if pages else 0
    for page in PAGES:
        text = generated(page)
        if text != (DOCS / page).read_text(encoding="utf-8"):
            (DOCS / page).write_text(text, encoding="utf-8")
            print(f"rewrote docs/{page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
