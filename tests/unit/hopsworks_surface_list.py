"""Build the list of the hopsworks SDK's members that the hopsworks-tutorials call (run once; its output is
tests/unit/hopsworks_surface.json, which test_hopsworks_surface.py measures hopsml against).

    python tests/unit/hopsworks_surface_list.py --tutorials <checkout or bare git dir> --sdk <wheel or unpacked dir> \
        [--out tests/unit/hopsworks_surface.json]

It reads the tutorials' notebooks (code cells) and .py files with `ast` and follows the objects the SDK returns
(`hopsworks.login()` gives a Project, `project.get_feature_store()` a FeatureStore, `fs.get_feature_group(...)` a
FeatureGroup, ...) through assignments, attribute chains, loops over lists and `self.x` fields, and records each
member called or read on such an object: which files use it, the most positional arguments and the keywords given.
The SDK's API docs are made from its docstrings: their python examples are traced the same way (with the names
they use for objects they do not create, `fs`, `fg`, `fv`, ...), and the few members issue 53 names are added.
A member is kept only when the SDK's source has it on that class (or a base class): names the tutorials call on
something else are dropped (a group's features read as attributes, `fg.amount`, count as its `__getattr__`).
Nothing of the tutorials' or the SDK's text is kept, only names and counts.
"""

from __future__ import annotations

import argparse
import ast
import json
import logging
import re
import subprocess
import sys
import tempfile
import textwrap
import zipfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("hopsworks_surface_list")

# The SDK classes measured: our name -> (file in the wheel, class name); a module's functions have class "".
CLASSES = {
    "hopsworks": ("hopsworks/__init__.py", ""),
    "Project": ("hopsworks_common/project.py", "Project"),
    "DatasetApi": ("hopsworks_common/core/dataset_api.py", "DatasetApi"),
    "JobApi": ("hopsworks_common/core/job_api.py", "JobApi"),
    "Job": ("hopsworks_common/job.py", "Job"),
    "Execution": ("hopsworks_common/execution.py", "Execution"),
    "FeatureStore": ("hsfs/feature_store.py", "FeatureStore"),
    "FeatureGroup": ("hsfs/feature_group.py", "FeatureGroup"),
    "Query": ("hsfs/constructor/query.py", "Query"),
    "FeatureView": ("hsfs/feature_view.py", "FeatureView"),
    "TrainingDataset": ("hsfs/training_dataset.py", "TrainingDataset"),
    "TransformationFunction": ("hsfs/transformation_function.py", "TransformationFunction"),
    "HopsworksUdf": ("hsfs/hopsworks_udf.py", "HopsworksUdf"),
    "hsfs.builtin_transformations": ("hsfs/builtin_transformations.py", ""),
    "hsfs.feature": ("hsfs/feature.py", ""),
    "hsml.schema": ("hsml/schema.py", ""),
    "hsml.model_schema": ("hsml/model_schema.py", ""),
    "hsml.transformer": ("hsml/transformer.py", ""),
    "ModelRegistry": ("hsml/model_registry.py", "ModelRegistry"),
    "mr.python": ("hsml/python/signature.py", ""),
    "mr.sklearn": ("hsml/sklearn/signature.py", ""),
    "mr.tensorflow": ("hsml/tensorflow/signature.py", ""),
    "mr.torch": ("hsml/torch/signature.py", ""),
    "Model": ("hsml/model.py", "Model"),
    "ModelServing": ("hsml/model_serving.py", "ModelServing"),
    "Predictor": ("hsml/predictor.py", "Predictor"),
    "Transformer": ("hsml/transformer.py", "Transformer"),
    "Deployment": ("hsml/deployment.py", "Deployment"),
}
MODULES = {"hopsworks": "hopsworks", "hsfs.builtin_transformations": "hsfs.builtin_transformations",
           "hopsworks.hsfs.builtin_transformations": "hsfs.builtin_transformations", "hsfs.feature": "hsfs.feature",
           "hsml.schema": "hsml.schema", "hsml.model_schema": "hsml.model_schema",
           "hsml.transformer": "hsml.transformer", "hopsworks.hsml.transformer": "hsml.transformer"}
LIST = "list:"   # a type "list:X" is a list of X (a loop or an index gives X)

# What a member returns, where the tutorials go on with it (read from the SDK's docstrings and return values).
RETURNS: dict[tuple[str, str], str] = {
    ("hopsworks", "login"): "Project", ("hopsworks", "get_current_project"): "Project",
    ("Project", "get_feature_store"): "FeatureStore", ("Project", "get_model_registry"): "ModelRegistry",
    ("Project", "get_model_serving"): "ModelServing", ("Project", "get_dataset_api"): "DatasetApi",
    ("Project", "get_job_api"): "JobApi", ("Project", "get_jobs_api"): "JobApi",
    ("JobApi", "create_job"): "Job", ("JobApi", "get_job"): "Job", ("JobApi", "get_jobs"): LIST + "Job",
    ("Job", "run"): "Execution", ("Job", "get_executions"): LIST + "Execution",
    **{("FeatureStore", m): "FeatureGroup" for m in (
        "get_feature_group", "get_or_create_feature_group", "create_feature_group", "get_external_feature_group",
        "create_external_feature_group", "get_or_create_spine_group", "create_on_demand_feature_group")},
    ("FeatureStore", "get_feature_groups"): LIST + "FeatureGroup",
    **{("FeatureStore", m): "FeatureView" for m in ("get_feature_view", "get_or_create_feature_view",
                                                     "create_feature_view")},
    ("FeatureStore", "get_feature_views"): LIST + "FeatureView",
    ("FeatureStore", "get_training_dataset"): "TrainingDataset",
    ("FeatureStore", "create_training_dataset"): "TrainingDataset",
    ("FeatureStore", "get_transformation_function"): "TransformationFunction",
    ("FeatureStore", "create_transformation_function"): "TransformationFunction",
    ("FeatureStore", "get_transformation_functions"): LIST + "TransformationFunction",
    **{("FeatureGroup", m): "Query" for m in ("select", "select_all", "select_except", "select_features", "filter",
                                              "as_of")},
    **{("Query", m): "Query" for m in ("join", "filter", "as_of", "pull_changes")},
    ("FeatureView", "query"): "Query", ("FeatureView", "get_batch_query"): "Query",
    ("FeatureView", "transformation_functions"): LIST + "TransformationFunction",
    ("TransformationFunction", "hopsworks_udf"): "HopsworksUdf",
    **{("hsfs.builtin_transformations", m): "HopsworksUdf" for m in (
        "min_max_scaler", "standard_scaler", "robust_scaler", "label_encoder", "one_hot_encoder")},
    ("HopsworksUdf", "alias"): "HopsworksUdf",
    **{("ModelRegistry", m): "mr." + m for m in ("python", "sklearn", "tensorflow", "torch")},
    ("ModelRegistry", "get_model"): "Model", ("ModelRegistry", "get_best_model"): "Model",
    ("ModelRegistry", "get_models"): LIST + "Model",
    **{("mr." + f, "create_model"): "Model" for f in ("python", "sklearn", "tensorflow", "torch")},
    ("Model", "deploy"): "Deployment", ("Model", "get_feature_view"): "FeatureView",
    ("ModelServing", "create_predictor"): "Predictor", ("ModelServing", "create_transformer"): "Transformer",
    ("ModelServing", "create_deployment"): "Deployment", ("ModelServing", "get_deployment"): "Deployment",
    ("ModelServing", "get_deployment_by_id"): "Deployment", ("ModelServing", "get_deployments"): LIST + "Deployment",
    ("Predictor", "deploy"): "Deployment", ("Deployment", "predictor"): "Predictor",
    ("Deployment", "transformer"): "Transformer", ("hsml.transformer", "Transformer"): "Transformer",
}
# Parameters of the tutorials' own functions that hold an SDK object (a helper such as `def backfill(fs, df)`).
# The names the SDK's docstring examples give its objects without creating them in the example.
DOCS_NAMES = {"project": "Project", "fs": "FeatureStore", "feature_store": "FeatureStore", "fg": "FeatureGroup",
              "feature_group": "FeatureGroup", "fv": "FeatureView", "feature_view": "FeatureView",
              "mr": "ModelRegistry", "ms": "ModelServing", "deployment": "Deployment", "model": "Model",
              "query": "Query", "td": "TrainingDataset", "job": "Job", "dataset_api": "DatasetApi",
              "job_api": "JobApi", "predictor": "Predictor", "execution": "Execution", "hopsworks": "hopsworks"}
# Members that issue 53 names as missing, measured too though neither the tutorials nor the docs' examples call them.
NAMED = (("Query", "pull_changes"), ("Model", "get_url"), ("Deployment", "get_url"))
PARAMETERS = {"project": "Project", "fs": "FeatureStore", "feature_store": "FeatureStore", "fg": "FeatureGroup",
              "feature_group": "FeatureGroup", "fv": "FeatureView", "feature_view": "FeatureView",
              "mr": "ModelRegistry", "ms": "ModelServing", "deployment": "Deployment"}


@dataclass
class Use:
    files: set[str] = field(default_factory=set)
    positional: int = 0
    keywords: set[str] = field(default_factory=set)


class Tracer(ast.NodeVisitor):
    """Follows SDK objects through one file's statements in order and records the members used on them."""

    def __init__(self, path: str, uses: dict[tuple[str, str], Use]) -> None:
        self.path, self.uses = path, uses
        self.env: dict[str, str] = {}

    # --- types of expressions -----------------------------------------------------------------------------
    def type_of(self, node: ast.AST | None) -> str | None:
        if isinstance(node, ast.Name):
            return self.env.get(node.id)
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                return self.env.get("self." + node.attr)
            owner = self.type_of(node.value)
            return RETURNS.get((owner, node.attr)) if owner else None
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute):
                owner = self.type_of(func.value)
                return RETURNS.get((owner, func.attr)) if owner else None
            if isinstance(func, ast.Name) and func.id in self.env:
                kind = self.env[func.id]
                if kind.startswith("function:"):
                    return RETURNS.get(tuple(kind[9:].split("|")))  # type: ignore[arg-type]
                if kind == "HopsworksUdf":
                    return "HopsworksUdf"
            return None
        if isinstance(node, ast.Subscript):
            kind = self.type_of(node.value)
            return kind[len(LIST):] if kind and kind.startswith(LIST) else None
        return None

    def bind(self, target: ast.AST, kind: str | None) -> None:
        key = None
        if isinstance(target, ast.Name):
            key = target.id
        elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
            key = "self." + target.attr
        if key is None:
            return
        if kind:
            self.env[key] = kind
        else:
            self.env.pop(key, None)

    # --- statements ---------------------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.asname and alias.name in MODULES:
                self.env[alias.asname] = MODULES[alias.name]
            elif alias.name == "hopsworks":
                self.env["hopsworks"] = "hopsworks"

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        for alias in node.names:
            full = f"{module}.{alias.name}"
            if full in MODULES:
                self.env[alias.asname or alias.name] = MODULES[full]
            elif module in MODULES:
                owner = MODULES[module]
                self.record(owner, alias.name, None)
                self.env[alias.asname or alias.name] = "function:" + owner + "|" + alias.name

    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        kind = self.type_of(node.value)
        for target in node.targets:
            self.visit_target(target)
            self.bind(target, kind)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)
            self.bind(node.target, self.type_of(node.value))

    def visit_target(self, target: ast.AST) -> None:
        if isinstance(target, ast.Attribute) and not (isinstance(target.value, ast.Name) and target.value.id == "self"):
            self.visit(target.value)   # fg.description = ... is a use of fg.description
            owner = self.type_of(target.value)
            if owner:
                self.record(owner, target.attr, None)

    def visit_For(self, node: ast.For) -> None:
        self.visit(node.iter)
        kind = self.type_of(node.iter)
        self.bind(node.target, kind[len(LIST):] if kind and kind.startswith(LIST) else None)
        for stmt in node.body + node.orelse:
            self.visit(stmt)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        saved = dict(self.env)
        for arg in node.args.args + node.args.kwonlyargs:
            if arg.arg in PARAMETERS:
                self.env[arg.arg] = PARAMETERS[arg.arg]
        for decorator in node.decorator_list:
            self.visit(decorator)
        for stmt in node.body:
            self.visit(stmt)
        fields = {k: v for k, v in self.env.items() if k.startswith("self.")}
        self.env = {**saved, **fields}   # a method's self.x fields reach the class's other methods
        if any(self._is_udf(d) for d in node.decorator_list):
            self.env[node.name] = "HopsworksUdf"

    visit_AsyncFunctionDef = visit_FunctionDef  # noqa: N815 - ast.NodeVisitor's name

    def _is_udf(self, decorator: ast.AST) -> bool:
        func = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(func, ast.Name):
            return self.env.get(func.id) == "function:hopsworks|udf" or func.id == "udf"
        return isinstance(func, ast.Attribute) and func.attr == "udf" and self.type_of(func.value) == "hopsworks"

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute):
            owner = self.type_of(func.value)
            if owner:
                self.record(owner, func.attr, node)
            self.visit(func.value)
        elif isinstance(func, ast.Name) and self.env.get(func.id, "").startswith("function:"):
            owner, _, member = self.env[func.id][9:].partition("|")
            self.record(owner, member, node)
        else:
            self.visit(func)
        for arg in node.args:
            self.visit(arg)
        for keyword in node.keywords:
            self.visit(keyword.value)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        owner = self.type_of(node.value)
        if owner:
            self.record(owner, node.attr, None)
        self.visit(node.value)

    def record(self, owner: str, member: str, call: ast.Call | None) -> None:
        if owner.startswith(LIST) or owner.startswith("function:") or not owner or member.startswith("_"):
            return
        use = self.uses[(owner, member)]
        use.files.add(self.path)
        if call is not None:
            use.positional = max(use.positional, sum(1 for a in call.args if not isinstance(a, ast.Starred)))
            use.keywords.update(k.arg for k in call.keywords if k.arg)


# --- the tutorials' code --------------------------------------------------------------------------------------
def tutorial_files(source: Path) -> list[tuple[str, str]]:
    """(path, code) of each notebook and .py file of a checkout or a bare git directory."""
    if (source / "HEAD").exists() and (source / "objects").is_dir():
        names = subprocess.run(["git", "-C", str(source), "ls-tree", "-r", "--name-only", "HEAD"], check=True,
                               capture_output=True, text=True).stdout.split()
        out = []
        for name in names:
            if name.endswith((".ipynb", ".py")):
                shown = subprocess.run(["git", "-C", str(source), "show", f"HEAD:{name}"], capture_output=True,
                                       text=True)
                if shown.returncode == 0:
                    out.append((name, shown.stdout))
        return out
    return [(str(p.relative_to(source)), p.read_text(errors="replace")) for p in sorted(source.rglob("*"))
            if p.suffix in (".ipynb", ".py") and ".git" not in p.parts]


def code_cells(path: str, text: str) -> list[str]:
    if not path.endswith(".ipynb"):
        return [text]
    try:
        cells = json.loads(text).get("cells", [])
    except ValueError:
        return []
    out = []
    for cell in cells:
        if cell.get("cell_type") == "code":
            source = "".join(cell.get("source", []))
            out.append("\n".join(line for line in source.splitlines()
                                 if not line.lstrip().startswith(("!", "%"))))
    return out


def trace(files: list[tuple[str, str]], seed: dict[str, str] | None = None) -> dict[tuple[str, str], Use]:
    uses: dict[tuple[str, str], Use] = defaultdict(Use)
    for path, text in files:
        tracer = Tracer(path, uses)
        tracer.env.update(seed or {})
        for cell in code_cells(path, text):
            try:
                tree = ast.parse(cell)
            except SyntaxError:
                log.info("%s: a cell that does not parse is skipped", path)
                continue
            for stmt in tree.body:
                tracer.visit(stmt)
    return uses


def docs_examples(sdk: Path) -> list[tuple[str, str]]:
    """(file, code) of each python example in the docstrings of the measured classes' files: the SDK's API docs
    are made from them."""
    out = []
    for rel in sorted({rel for rel, _ in CLASSES.values()}):
        for block in re.findall(r"```python\n(.*?)```", (sdk / rel).read_text(), re.S):
            out.append((f"sdk-docs:{rel}", textwrap.dedent(block)))
    return out


# --- the SDK's members ------------------------------------------------------------------------------------------
Member = tuple[str, "ast.FunctionDef | ast.AsyncFunctionDef | None"]   # (kind, the def its signature is read from)


def sdk_index(sdk: Path) -> dict[str, dict[str, Member]]:
    """Our class name -> {member: (kind, def)} from the SDK's source, kind one of 'method', 'property',
    'attribute', 'function', 'class'; with the members of its base classes found in the SDK. A class's def is its
    __init__; a module's alias (`udf = hsfs.hopsworks_udf.udf`) is the def it names."""
    classes: dict[str, list[tuple[Path, ast.ClassDef]]] = defaultdict(list)
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    for path in sorted(sdk.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                classes[node.name].append((path, node))
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                functions.setdefault(node.name, node)

    def find_class(name: str, near: Path) -> tuple[Path, ast.ClassDef] | None:
        found = sorted(classes.get(name, []), key=lambda c: c[0] != near)
        return found[0] if found else None

    def of_class(path: Path, node: ast.ClassDef, seen: set[str]) -> dict[str, Member]:
        out: dict[str, Member] = {}
        for base in node.bases:
            name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", None)
            found = find_class(name, path) if name and name not in seen else None
            if found:
                out.update(of_class(found[0], found[1], seen | {name}))
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                decorators = {getattr(d, "id", getattr(d, "attr", "")) for d in item.decorator_list}
                out[item.name] = ("property" if "property" in decorators or "setter" in decorators else "method",
                                  item)
            elif isinstance(item, (ast.Assign, ast.AnnAssign)):
                for target in item.targets if isinstance(item, ast.Assign) else [item.target]:
                    if isinstance(target, ast.Name):
                        out.setdefault(target.id, ("attribute", None))
        return out

    def init_of(name: str, near: Path) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        found = find_class(name, near)
        return of_class(found[0], found[1], {name}).get("__init__", ("", None))[1] if found else None

    index: dict[str, dict[str, Member]] = {}
    for ours, (rel, class_name) in CLASSES.items():
        path = sdk / rel
        tree = ast.parse(path.read_text())
        if class_name:
            node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name)
            index[ours] = of_class(path, node, {class_name})
            continue
        module: dict[str, Member] = {}
        for item in tree.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                module[item.name] = ("function", item)
            elif isinstance(item, ast.ClassDef):
                module[item.name] = ("class", init_of(item.name, path))
            elif isinstance(item, ast.Assign) and isinstance(item.value, ast.Attribute):
                owner = item.value.value
                owner_name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
                found = find_class(owner_name, path)
                named = of_class(found[0], found[1], {owner_name}).get(item.value.attr) if found else None
                for target in item.targets:
                    if isinstance(target, ast.Name):
                        module[target.id] = ("function", named[1] if named else functions.get(item.value.attr))
            elif isinstance(item, ast.ImportFrom):
                module.update({(a.asname or a.name): ("class", init_of(a.name, path)) for a in item.names
                               if a.name[:1].isupper()})
        index[ours] = module
    return index


def unpacked(sdk: Path) -> Path:
    if sdk.is_dir():
        return sdk
    target = Path(tempfile.mkdtemp(prefix="hopsworks-sdk-"))
    with zipfile.ZipFile(sdk) as wheel:
        wheel.extractall(target)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tutorials", type=Path, required=True)
    parser.add_argument("--sdk", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("hopsworks_surface.json"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    sdk = unpacked(args.sdk)
    members = {owner: {m: kind for m, (kind, _) in found.items()} for owner, found in sdk_index(sdk).items()}
    files = tutorial_files(args.tutorials)
    uses = trace(files)
    docs = trace(docs_examples(sdk), DOCS_NAMES)
    for found in (uses, docs):   # `fg.amount` is a feature of the group where the class answers __getattr__
        for owner, member in list(found):
            if member not in members.get(owner, {}) and "__getattr__" in members.get(owner, {}):
                use, into = found.pop((owner, member)), found[(owner, "__getattr__")]
                into.files |= use.files
    kept, dropped = [], []
    for key in sorted(set(uses) | set(docs) | set(NAMED)):
        owner, member = key
        kind = members.get(owner, {}).get(member)
        if kind is None:
            if key in uses:
                dropped.append(f"{owner}.{member}")
            continue
        use, doc = uses.get(key, Use()), docs.get(key, Use())
        kept.append({"class": owner, "member": member, "kind": kind, "files": sorted(use.files),
                     "docs": sorted(doc.files), "issue": key in NAMED,
                     "positional": max(use.positional, doc.positional),
                     "keywords": sorted(use.keywords | doc.keywords)})
    version = next((p.name for p in sdk.glob("hopsworks-*.dist-info")), "?")
    commit = subprocess.run(["git", "-C", str(args.tutorials), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    data = {"sdk": version.removesuffix(".dist-info"), "tutorials": f"logicalclocks/hopsworks-tutorials@{commit}",
            "files_read": len(files), "classes": {k: f"{p}:{c}" if c else p for k, (p, c) in CLASSES.items()},
            "members": kept}
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"{len(kept)} members ({sum(1 for m in kept if m['files'])} used by the tutorials' {len(files)} files) "
          f"-> {args.out}")
    if dropped:
        print("used on an SDK object but not the SDK's member there (dropped):", ", ".join(dropped))
    return 0


if __name__ == "__main__":
    sys.exit(main())
