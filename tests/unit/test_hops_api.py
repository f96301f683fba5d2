"""hops' public functions, read from hops' own source distribution (ast, never imported), exist in
hopsml with hops' parameter names in hops' order, so positional and keyword calls both work.

The sdist comes from the package index: `pip download --no-deps --no-binary :all: hops==3.8.0.0` (CI
does this and sets HOPSML_HOPS_SDIST). What only talks to Hopsworks' REST server, TLS, Kafka or JWT
is out of scope; docs/hops.md's list says so, and this test checks that the two lists agree.
"""

import ast
import importlib
import inspect
import os
import tarfile
from pathlib import Path

import pytest

MODULES = ["experiment", "hdfs", "tensorboard", "devices", "model", "util", "numpy_helper", "pandas_helper"]

# function -> why it is not in hopsml (docs/hops.md lists the same names)
OUT_OF_SCOPE = {
    "hdfs.project_id": "Hopsworks' project id from its REST server",
    "hdfs.is_tls_enabled": "Hopsworks' TLS set-up",
    "hdfs.get_webhdfs_host": "Hopsworks' WebHDFS service",
    "hdfs.get_webhdfs_port": "Hopsworks' WebHDFS service",
    **{f"util.{name}": "Hopsworks' REST server, JWT, secrets or the services around it" for name in (
        "http", "connect", "set_auth_header", "get_requests_verify", "send_request", "get_jwt",
        "parse_redhift_jdbc_url", "get_redshift_username_password", "get_flink_conf_dir", "get_flink_lib_dir",
        "get_hadoop_home", "get_hadoop_classpath_glob", "get_secret", "write_b64_cert_to_bytes",
        "notebook_post_save", "get_notebook_kernel_id", "attach_jupyter_configuration_to_notebook")},
}


def _sdist() -> Path:
    given = os.environ.get("HOPSML_HOPS_SDIST")
    if not given:
        if os.environ.get("CI"):
            pytest.fail("CI must set HOPSML_HOPS_SDIST to hops 3.8.0.0's sdist (.ci/run downloads it)")
        pytest.skip("HOPSML_HOPS_SDIST is not set: pip download --no-deps --no-binary :all: hops==3.8.0.0")
    return Path(given)


def hops_functions() -> dict[str, list[str]]:
    """'module.function' -> its parameter names, for the definition Python keeps (hops defines some twice)."""
    found: dict[str, list[str]] = {}
    with tarfile.open(_sdist()) as archive:
        for module in MODULES:
            member = next(m for m in archive.getmembers() if m.name.endswith(f"/hops/{module}.py"))
            tree = ast.parse(archive.extractfile(member).read())
            for node in tree.body:
                if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
                    found[f"{module}.{node.name}"] = [a.arg for a in node.args.args]
    return found


def test_every_hops_function_in_scope_exists_with_hops_parameters():
    problems = []
    for qualified, hops_params in hops_functions().items():
        if qualified in OUT_OF_SCOPE:
            continue
        module, name = qualified.split(".")
        ours = getattr(importlib.import_module(f"hopsml.{module}"), name, None)
        if ours is None:
            problems.append(f"{qualified} is missing")
            continue
        params = inspect.signature(ours).parameters.values()
        positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if positional[:len(hops_params)] != hops_params:
            problems.append(f"{qualified}{tuple(positional)} takes hops' {tuple(hops_params)} differently")
    assert not problems, "\n".join(problems)


def test_the_out_of_scope_list_is_hops_own_and_in_the_docs():
    assert set(OUT_OF_SCOPE) <= set(hops_functions())  # nothing listed that hops does not have
    page = (Path(__file__).parents[2] / "docs" / "hops.md").read_text()
    missing = [name for name in OUT_OF_SCOPE if f"`{name.split('.')[1]}`" not in page]
    assert not missing, f"docs/hops.md's out-of-scope list lacks {missing}"
