"""The package's imports run one way: no import circle between modules, and no import that runs back up the
layers below (every import counts, also those inside a function or under TYPE_CHECKING, since each is a
dependency a reader has to hold in mind). docs/architecture.md explains the layers."""

from __future__ import annotations

import ast
import os

import pytest

import hopsml

PACKAGE_DIR = os.path.dirname(hopsml.__file__)

# Lowest first: a module may import its own room (package or top-level module) and the rooms of its layer
# or any layer below, never a room above.
LAYERS: list[set[str]] = [
    {"hopsml", "errors", "redact", "orphans", "processes", "cli_tables", "progress", "devices", "request_notes",
     "execution_notes", "installed", "clock"},
    {"layout", "fs", "net", "config", "records"},
    {"formats", "skeleton", "hdfs_file"},
    {"tracking", "timeline", "run_catalog", "tensorboard", "checkpoint", "hdfs"},
    {"cluster", "search", "numpy_helper", "pandas_helper"},
    {"collective", "data"},
    {"launcher", "torch"},
    {"runs", "model", "featurestore"},
    {"serving", "experiment", "util", "hopsworks", "jobs"},
    {"experiments", "examples", "ui", "airflow"},
    {"cli"},
]

# A wing laid out by process role keeps the same rule inside: its rooms (subpackages, or "" for the modules of the
# wing's own folder that its docstring names as shared, and the wing's face) import only their own room and those
# below. Lowest first.
WING_ROOMS: dict[str, list[set[str]]] = {
    "serving": [{"definition", "autoscale"}, {"instance"}, {"server"}, {"analysis"}, {"control"}, {""}],
}


def _modules() -> dict[str, str]:
    found = {}
    for folder, dirs, files in os.walk(PACKAGE_DIR):
        dirs[:] = [d for d in dirs if d not in ("conf", "__pycache__")]
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                dotted = os.path.relpath(path, os.path.dirname(PACKAGE_DIR))[:-3].replace(os.sep, ".")
                found[dotted.removesuffix(".__init__")] = path
    return found


def _imports(module: str, path: str, modules: dict[str, str]) -> set[str]:
    """The hopsml modules `module` imports anywhere in its file."""
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    named: set[str] = set()
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                named.add(full if full in modules else base)
    return {name for name in named if name in modules and name != module}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {module: _imports(module, path, modules) for module, path in modules.items()}


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        circles.append(sorted(component))
    return circles


def test_the_walk_finds_the_engine_and_what_it_imports():
    graph = _graph()
    assert "hopsml.runs.start" in graph["hopsml.runs.engine"]
    assert "hopsml.cluster.preflight" in graph["hopsml.launcher.driver"]


def test_the_circle_finder_finds_a_circle_of_three():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_itself_back_through_others():
    circles = _circles(_graph())
    assert not circles, "import circles: " + "; ".join(" <-> ".join(c) for c in circles)


def test_every_room_has_a_layer():
    rooms = {_room(module) for module in _graph()}
    placed = set().union(*LAYERS)
    assert rooms <= placed, f"add {sorted(rooms - placed)} to a layer of LAYERS (and to docs/architecture.md)"
    assert not placed - rooms, f"LAYERS names rooms that do not exist: {sorted(placed - rooms)}"


@pytest.mark.parametrize("layer", range(len(LAYERS)))
def test_no_import_runs_back_up_the_layers(layer):
    rank = {room: i for i, rooms in enumerate(LAYERS) for room in rooms}
    upward = sorted(f"{module} -> {target}" for module, targets in _graph().items() for target in targets
                    if rank.get(_room(module)) == layer and rank.get(_room(target), -1) > layer)
    assert not upward, "imports that run back up the layers: " + ", ".join(upward)


def _wing_room(module: str) -> str:
    """The room of a wing's module: `hopsml.serving.control.lifecycle` -> control; the face -> ''."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else ""


@pytest.mark.parametrize("wing", sorted(WING_ROOMS))
def test_a_wing_laid_out_by_process_role_imports_only_downward(wing):
    graph = _graph()
    inside = {module for module in graph if _room(module) == wing}
    rank = {room: i for i, rooms in enumerate(WING_ROOMS[wing]) for room in rooms}
    assert {_wing_room(module) for module in inside} == set(rank), f"give every room of {wing}/ a place in WING_ROOMS"
    upward = sorted(f"{module} -> {target}" for module in inside for target in graph[module]
                    if target in inside and rank[_wing_room(target)] > rank[_wing_room(module)])
    assert not upward, f"imports that run back up {wing}/'s rooms: " + ", ".join(upward)
