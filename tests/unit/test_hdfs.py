"""hopsml.hdfs with hops' semantics, on real files: a local root, a file:// root and S3 (a local S3
server speaking the real protocol). HDFS itself needs a Hadoop cluster; it goes through the same calls."""

import os
import stat as stat_module
import sys

import pytest
from s3 import s3_root, s3_server

from hopsml import hdfs
from hopsml.errors import HopsmlError, StorageError
from hopsml.hdfs import InvalidPathError, PathExistsError, PathNotFoundError


@pytest.fixture(scope="module")
def s3_endpoint():
    with s3_server() as endpoint:
        yield endpoint


@pytest.fixture(params=["local", "file", "s3"])
def project(request, tmp_path, monkeypatch):
    """A fresh root of each kind with project 'test'; yields the root's URI form."""
    if request.param == "local":
        root = str(tmp_path / "root")
    elif request.param == "file":
        root = f"file://{tmp_path}/root"
    else:
        root = s3_root(request.getfixturevalue("s3_endpoint"))
    monkeypatch.setenv("HOPSML_ROOT", root)
    monkeypatch.setenv("HOPSML_PROJECT", "test")
    monkeypatch.delenv("HOPSML_CONF", raising=False)
    monkeypatch.delenv("HADOOP_USER_NAME", raising=False)
    monkeypatch.chdir(tmp_path)
    return request.param


@pytest.fixture
def local_root(tmp_path, monkeypatch):
    path = tmp_path / "root"
    monkeypatch.setenv("HOPSML_ROOT", str(path))
    monkeypatch.setenv("HOPSML_PROJECT", "test")
    monkeypatch.delenv("HOPSML_CONF", raising=False)
    monkeypatch.chdir(tmp_path)
    return path


def test_project_path_ends_with_a_slash_and_every_path_form_names_the_same_file(project):
    base = hdfs.project_path()
    assert base.endswith("/test/") and not base.endswith("//")
    hdfs.dump("hello", "TourData/a.txt")
    forms = ["TourData/a.txt", "TourData//a.txt", "./TourData/a.txt", base + "TourData/a.txt",
             base + "/TourData/a.txt", "/Projects/test/TourData/a.txt", "hdfs:///Projects/test/TourData/a.txt",
             "hdfs://10.0.2.15:8020/Projects/test/TourData/a.txt", "Projects/test/TourData/a.txt"]
    if project == "local":
        forms.append("file://" + base + "TourData/a.txt")
    for form in forms:
        assert hdfs.exists(form), form
        assert hdfs.load(form) == b"hello", form
        assert hdfs.abs_path(form) == base + "TourData/a.txt", form
    assert not hdfs.exists(base + "TourData/b.txt") and not hdfs.exists("TourData/b.txt")
    assert hdfs.project_path("other").endswith("/other/")


def test_paths_outside_the_root_are_refused(project, tmp_path):
    for outside in [str(tmp_path / "elsewhere.txt"), "s3://another-bucket/x", "gs://b/x", "../../../escape"]:
        with pytest.raises(InvalidPathError, match="not under the hopsml root"):
            hdfs.exists(outside)


def test_load_dump_and_missing_files(project):
    hdfs.dump(b"\x00\x01", "Resources/bin")
    hdfs.dump("text \u00e9", "Resources/bin")  # replaces
    assert hdfs.load("Resources/bin") == "text \u00e9".encode()
    with pytest.raises(PathNotFoundError, match="does not exist") as missing:
        hdfs.load("Resources/nope")
    assert isinstance(missing.value, IOError) and isinstance(missing.value, HopsmlError)
    with pytest.raises(TypeError, match="str or bytes"):
        hdfs.dump({"a": 1}, "Resources/x")


def test_copy_to_hdfs_copies_into_the_folder_and_refuses_to_overwrite(project, tmp_path):
    (tmp_path / "test.txt").write_text("v1")
    where = hdfs.copy_to_hdfs("test.txt", "Resources")  # relative to the working directory, as in hops
    assert where == hdfs.project_path() + "Resources/test.txt"
    assert hdfs.load("Resources/test.txt") == b"v1" and hdfs.isdir("Resources")
    (tmp_path / "test.txt").write_text("v2")
    with pytest.raises(PathExistsError, match="overwrite=True"):
        hdfs.copy_to_hdfs(str(tmp_path / "test.txt"), hdfs.project_path() + "Resources")
    assert hdfs.load("Resources/test.txt") == b"v1"
    hdfs.copy_to_hdfs("test.txt", "/Projects/test/Resources/", overwrite=True)
    assert hdfs.load("Resources/test.txt") == b"v2"
    assert hdfs.ls("Resources") == [hdfs.project_path() + "Resources/README.md", where]  # the project's own README
    assert not hdfs.exists("tmp")

    (tmp_path / "tree" / "sub").mkdir(parents=True)
    (tmp_path / "tree" / "sub" / "f.bin").write_bytes(b"123")
    (tmp_path / "tree" / "empty").mkdir()
    hdfs.copy_to_hdfs(str(tmp_path / "tree"), "Data")
    assert hdfs.load("Data/tree/sub/f.bin") == b"123" and hdfs.isdir("Data/tree/empty")
    with pytest.raises(PathNotFoundError, match="no such local file"):
        hdfs.copy_to_hdfs("missing.txt", "Data")
    with pytest.raises(PathExistsError, match="is a file"):
        hdfs.copy_to_hdfs("test.txt", "Resources/test.txt")


def test_copy_to_local_copies_into_a_folder_and_keeps_an_identical_copy(project, tmp_path):
    hdfs.dump("abc", "Resources/data.csv")
    back = hdfs.copy_to_local("Resources/data.csv")  # default: the working directory
    assert back == str(tmp_path / "data.csv") and open(back).read() == "abc"
    into = hdfs.copy_to_local(hdfs.project_path() + "Resources/data.csv", str(tmp_path / "dl"))
    assert into == str(tmp_path / "dl" / "data.csv")
    (tmp_path / "dl" / "data.csv").write_text("xyz")  # same size: hops keeps it
    assert open(hdfs.copy_to_local("Resources/data.csv", "dl")).read() == "xyz"
    assert open(hdfs.copy_to_local("Resources/data.csv", "dl", overwrite=True)).read() == "abc"
    (tmp_path / "dl" / "data.csv").write_text("longer text")  # a different copy is replaced
    assert open(hdfs.copy_to_local("Resources/data.csv", "dl")).read() == "abc"

    hdfs.dump("1", "Tree/a/one.txt")
    hdfs.mkdir("Tree/empty")
    folder = hdfs.copy_to_local("Tree", "dl")
    assert open(os.path.join(folder, "a", "one.txt")).read() == "1" and os.path.isdir(os.path.join(folder, "empty"))
    with pytest.raises(PathNotFoundError):
        hdfs.copy_to_local("Resources/none.csv")
    with pytest.raises(PathExistsError, match="is a file"):
        hdfs.copy_to_local("Resources/data.csv", str(tmp_path / "data.csv"))


def test_listing_glob_and_stat(project):
    for name in ("Logs/README.md", "Logs/notes.md", "Logs/run/events.out", "Logs/run/x.log"):
        hdfs.dump("content", name)
    base = hdfs.project_path()
    assert hdfs.ls("Logs/") == [base + "Logs/README.md", base + "Logs/notes.md", base + "Logs/run"]
    assert base + "Logs/run/x.log" in hdfs.ls("Logs", recursive=True)
    assert hdfs.ls("Logs/README.md") == [base + "Logs/README.md"]
    with pytest.raises(PathNotFoundError):
        hdfs.ls("Nothing")
    assert hdfs.glob("Logs/*.md") == [base + "Logs/README.md", base + "Logs/notes.md"]
    assert hdfs.glob(base + "Logs/*/events*") == [base + "Logs/run/events.out"]
    assert hdfs.glob("Logs/*.log", recursive=True) == [base + "Logs/run/x.log"]
    assert hdfs.glob("Logs/*.csv") == []
    with pytest.raises(PathNotFoundError, match="does not exist"):
        hdfs.glob("Nothing/*.md")

    entries = {e["name"]: e for e in hdfs.lsl("Logs")}
    assert entries[base + "Logs/README.md"]["kind"] == "file" and entries[base + "Logs/README.md"]["size"] == 7
    assert entries[base + "Logs/run"]["kind"] == "directory"
    st = hdfs.stat("Logs/README.md")
    assert st.st_size == 7 and st.kind == "file" and st.st_mtime > 0 and stat_module.S_ISREG(st.st_mode)
    assert stat_module.S_ISDIR(hdfs.stat("Logs/run").st_mode) and hdfs.stat("Logs/run").kind == "directory"
    assert hdfs.isfile("Logs/README.md") and not hdfs.isfile("Logs/run") and not hdfs.isfile("Logs/none")
    assert hdfs.isdir("Logs/run") and not hdfs.isdir("Logs/README.md") and not hdfs.isdir("Logs/none")
    with pytest.raises(PathNotFoundError):
        hdfs.stat("Logs/none")


def test_cp_mkdir_rmr_move_rename(project):
    hdfs.dump("t", "Resources/test.txt")
    hdfs.mkdir("Logs")
    hdfs.cp("Resources/test.txt", "Logs/")  # into the existing folder, as pydoop's cp
    assert hdfs.load("Logs/test.txt") == b"t"
    with pytest.raises(PathExistsError, match="already exists"):
        hdfs.cp("Resources/test.txt", "Logs")
    hdfs.dump("u", "Resources/test.txt")
    hdfs.cp("Resources/test.txt", "Logs", overwrite=True)
    assert hdfs.load("Logs/test.txt") == b"u"
    hdfs.cp("Logs", "LogsCopy")  # a folder, to a new name
    assert hdfs.load("LogsCopy/test.txt") == b"u"

    hdfs.mkdir("Logs/test_dir/deeper")
    assert hdfs.isdir("Logs/test_dir/deeper")
    hdfs.rmr("Logs/test_dir")
    assert not hdfs.exists("Logs/test_dir")
    with pytest.raises(PathNotFoundError):
        hdfs.rmr("Logs/test_dir")
    with pytest.raises(PathExistsError, match="a file has that name"):
        hdfs.mkdir("Logs/test.txt")

    hdfs.dump("readme", "Logs/README_dump_test.md")
    hdfs.move("Logs/README_dump_test.md", "Logs/README_dump_test2.md")
    assert not hdfs.exists("Logs/README_dump_test.md") and hdfs.load("Logs/README_dump_test2.md") == b"readme"
    hdfs.rename("Logs/README_dump_test2.md", "Logs/README_dump_test.md")
    assert hdfs.load("Logs/README_dump_test.md") == b"readme"
    with pytest.raises(PathExistsError):
        hdfs.move("Logs/README_dump_test.md", "Logs/test.txt")
    hdfs.move("LogsCopy", "Archive/")  # a folder, to a new place
    assert hdfs.load("Archive/test.txt") == b"u" and not hdfs.exists("LogsCopy")
    hdfs.mkdir("Moved")
    hdfs.move("Archive", "Moved")  # into an existing folder
    assert hdfs.load("Moved/Archive/test.txt") == b"u"
    with pytest.raises(PathNotFoundError):
        hdfs.move("Archive", "Elsewhere")

    with pytest.raises(PathExistsError, match="not empty"):
        hdfs.delete("Moved")
    hdfs.delete("Moved", recursive=True)
    assert not hdfs.exists("Moved")


def test_open_file_with_and_without_with(project):
    f = hdfs.open_file("Resources/new.txt", flags="w")
    f.write("written ")
    f.write(b"bytes")
    assert not hdfs.exists("Resources/new.txt")  # lands on close, in one piece
    f.close()
    assert hdfs.load("Resources/new.txt") == b"written bytes"

    f = hdfs.open_file("Resources/new.txt")
    assert f.read(7) == b"written" and f.read() == b" bytes"
    f.close()
    with hdfs.open_file(hdfs.project_path() + "Resources/new.txt", mode="rt") as text:
        assert text.read() == "written bytes"
    with hdfs.open_file("Resources/lines.txt", flags="wt") as text:
        text.write("a\nb\n")
    with hdfs.open_file("Resources/lines.txt", flags="r") as stream:
        assert list(stream) == [b"a\n", b"b\n"]

    with pytest.raises(RuntimeError):
        with hdfs.open_file("Resources/new.txt", flags="w") as f:
            f.write(b"half")
            raise RuntimeError("crash")
    assert hdfs.load("Resources/new.txt") == b"written bytes"  # the failed write left no trace
    with pytest.raises(RuntimeError):
        with hdfs.open_file("Resources/new.txt", flags="wt") as f:
            f.write("half")
            raise RuntimeError("crash")
    assert hdfs.load("Resources/new.txt") == b"written bytes"
    with pytest.raises(PathNotFoundError):
        hdfs.open_file("Resources/none.txt")
    with pytest.raises(ValueError, match="flags"):
        hdfs.open_file("Resources/new.txt", flags="x")
    with hdfs.open_file("Resources/py.txt", "wb") as f:  # Python's open() habit: the mode second
        f.write(b"py")
    assert hdfs.open_file("Resources/py.txt", "rb").read() == b"py"
    assert hdfs.open_file("Resources/py.txt", None, "rt").read() == "py"  # hops' order


def test_append(project):
    hdfs.dump("1\n", "m.txt")
    try:
        with hdfs.open_file("m.txt", flags="a") as f:
            f.write("2\n")
    except StorageError as exc:  # object stores have no append
        assert project == "s3" and "cannot append" in str(exc)
        return
    assert hdfs.load("m.txt") == b"1\n2\n"


def test_project_name_user_fs_and_plain_path(project, monkeypatch):
    assert hdfs.project_name() == "test"
    monkeypatch.setenv("HOPSML_USER", "alice")
    assert hdfs.project_user() == "test__alice"
    monkeypatch.setenv("HADOOP_USER_NAME", "test__bob")
    assert hdfs.project_user() == "test__bob"
    hdfs.dump("x", "Resources/x.txt")
    plain = hdfs.get_plain_path(hdfs.abs_path("Resources/x.txt"))
    with hdfs.get_fs().open_input_stream(plain) as stream:
        assert stream.read() == b"x"


def test_a_local_root_reached_through_a_symlink(local_root, tmp_path):
    hdfs.dump("x", "a.txt")
    link = tmp_path / "link"
    link.symlink_to(local_root)
    assert hdfs.load(str(link / "Projects" / "test" / "a.txt")) == b"x"


def test_inside_a_run_the_run_root_and_project_win(local_root, tmp_path):
    from hopsml.fs import Storage
    from hopsml.layout import RunDir
    from hopsml.tracking import run_context

    run_root = tmp_path / "run-root"
    storage = Storage(str(run_root))
    storage.write_text("Projects/demo/Resources/x.txt", "run")
    with run_context.active_run(storage, RunDir("Projects/demo/Experiments/app_1")):
        assert hdfs.project_name() == "demo"
        assert hdfs.project_path() == str(run_root / "Projects" / "demo") + "/"
        assert hdfs.load("Resources/x.txt") == b"run"
        assert hdfs.project_path("other") == str(run_root / "Projects" / "other") + "/"
    assert hdfs.project_name() == "test" and not hdfs.exists("Resources/x.txt")


def test_path_forms_on_an_hdfs_root_map_without_a_cluster(monkeypatch):
    """Path mapping needs no namenode; reading would (libhdfs), which this machine has not."""
    monkeypatch.setenv("HOPSML_ROOT", "hdfs://nn:8020/base")
    monkeypatch.setenv("HOPSML_PROJECT", "demo")
    monkeypatch.delenv("HOPSML_CONF", raising=False)
    base = "hdfs://nn:8020/base/Projects/demo/"
    assert hdfs.project_path() == base and hdfs.project_path(exclude_nn_addr=True) == "hdfs:///base/Projects/demo/"
    for form in ["x/y", base + "x/y", "hdfs:///Projects/demo/x/y", "hdfs://10.0.2.15:8020/Projects/demo/x/y",
                 "/Projects/demo/x/y", "hopsfs:///base/Projects/demo/x/y",
                 hdfs.project_path(exclude_nn_addr=True) + "x/y"]:
        assert hdfs.abs_path(form) == base + "x/y", form
    with pytest.raises(InvalidPathError):
        hdfs.abs_path("hdfs://nn:8020/elsewhere/x")
    with pytest.raises(InvalidPathError):
        hdfs.abs_path("/tmp/x")


def test_hops_keyword_names_and_the_rest_of_hops_hdfs(project, tmp_path):
    (tmp_path / "data.csv").write_text("1,2")
    where = hdfs.copy_to_hdfs("data.csv", relative_hdfs_path="Resources")
    assert hdfs.glob(hdfs_path="Resources/*.csv") == [where]
    assert hdfs.get_plain_path(abs_path="Resources/data.csv") == hdfs.get_plain_path("Resources/data.csv")
    assert hdfs.ls("Resources", False, True) == hdfs.ls("Resources")  # no namenode to drop off this root
    assert type(hdfs.get()) is type(hdfs.get_fs())
    hdfs.close()
    assert hdfs.access("Resources/data.csv", os.R_OK) and not hdfs.access("Resources/none.csv", os.F_OK)

    (tmp_path / "helpers_mod_for_test.py").write_text("ANSWER = 42\n")
    hdfs.copy_to_hdfs("helpers_mod_for_test.py", "Resources")
    local = hdfs.add_module("Resources/helpers_mod_for_test.py")
    import helpers_mod_for_test

    assert helpers_mod_for_test.ANSWER == 42 and os.path.dirname(local) in sys.path
    with pytest.raises(InvalidPathError, match=r"\.py file or a package folder"):
        hdfs.add_module("Resources/data.csv")

    if project == "s3":  # no permissions and no capacity through pyarrow: said so, nothing pretended
        with pytest.raises(StorageError, match="local root only"):
            hdfs.chmod("Resources/data.csv", 0o600)
        with pytest.raises(StorageError, match="local root"):
            hdfs.capacity()
        return
    hdfs.chmod("Resources/data.csv", "600")
    assert stat_module.S_IMODE(hdfs.stat("Resources/data.csv").st_mode) == 0o600
    assert hdfs.capacity() > 0
    me = hdfs.stat("Resources/data.csv")
    import pwd

    hdfs.chown("Resources/data.csv", pwd.getpwuid(os.getuid()).pw_name, None)  # to oneself: needs no root
    assert hdfs.stat("Resources/data.csv").st_uid == me.st_uid


def test_ls_drops_the_namenode_when_asked():
    assert hdfs._without_namenode("hdfs://nn:8020/base/Projects/demo/x") == "hdfs:///base/Projects/demo/x"
    assert hdfs._without_namenode("s3://bucket/x") == "s3://bucket/x"
