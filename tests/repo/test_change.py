"""The agent's change computed on the host (evsys.repo.change): contents compared without git, `.git` never
read, and what could change how tests run dropped with a reason."""

from __future__ import annotations

import io
import tarfile

from evsys.repo.change import Entry, change_patch, compute_change, overlay_tar, tree_of_tar

BASE = {
    "calc/__init__.py": Entry(b"def neg(a):\n    return a\n"),
    "tests/test_calc.py": Entry(b"def test_add(): pass\n"),
    "pyproject.toml": Entry(b'[project]\nname = "calc"\n\n[tool.pytest.ini_options]\naddopts = "-q"\n'),
    "setup.cfg": Entry(b"[metadata]\nname = calc\n"),
    "src/_pytest/runner.py": Entry(b"# pytest's own source, in the pytest repository\n"),
}


def _tar(files: dict[str, bytes], top: str = "testbed") -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for path, data in files.items():
            info = tarfile.TarInfo(f"{top}/{path}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def test_the_agents_git_metadata_is_never_read():
    tree = tree_of_tar(
        _tar({"a.py": b"x", ".git/config": b"[core]\nfsmonitor = evil\n", "sub/.git": b"gitdir: x"}),
        strip_top=True,
    )
    assert set(tree) == {"a.py"}


def test_source_changes_and_untracked_files_reach_the_grading_tree_and_test_machinery_does_not():
    agent = dict(BASE)
    agent["calc/__init__.py"] = Entry(b"def neg(a):\n    return -a\n")
    agent["calc/helpers.py"] = Entry(b"X = 1\n")  # untracked, new: kept
    agent["src/_pytest/runner.py"] = Entry(b"# fixed\n")  # the repository's own module: kept
    agent["setup.cfg"] = Entry(b"[metadata]\nname = calc\nversion = 2\n")  # no pytest section change: kept
    dropped = {
        "tests/test_calc.py": Entry(b"def test_add(): pass\ndef test_neg(): pass\n"),
        "conftest.py": Entry(b"x"),
        "tests/unit/conftest.py": Entry(b"x"),
        "pytest.ini": Entry(b"[pytest]\naddopts = -p evil\n"),
        "tox.ini": Entry(b"[pytest]\n"),
        "pyproject.toml": Entry(BASE["pyproject.toml"].data.replace(b'"-q"', b'"-p evil"')),
        "evil.pth": Entry(b"import evil\n"),
        "sitecustomize.py": Entry(b"x"),
        "calc/__pycache__/__init__.cpython-311.pyc": Entry(b"x"),
        "calc.egg-info/entry_points.txt": Entry(b"[pytest11]\nevil = evil\n"),
        "pytest.py": Entry(b"x"),
        "src/pluggy/__init__.py": Entry(b"x"),
        "tests/json.py": Entry(b"x"),
        "pytest_evil.py": Entry(b"x"),
        "calc/link.py": Entry(b"/etc/passwd", link=True),
    }
    change = compute_change(BASE, agent | dropped, ["tests/test_calc.py"])
    assert set(change.writes) == {"calc/__init__.py", "calc/helpers.py", "src/_pytest/runner.py", "setup.cfg"}
    assert set(change.dropped) == set(dropped)
    assert change.dropped["tests/json.py"].startswith("a new top-level module 'json'")


def test_a_deleted_conftest_is_dropped_and_a_deleted_source_file_is_deleted():
    base = BASE | {"conftest.py": Entry(b"x"), "calc/old.py": Entry(b"x")}
    change = compute_change(base, dict(BASE), [])
    assert change.deletes == ["calc/old.py"] and set(change.dropped) == {"conftest.py"}


def test_the_overlay_is_root_owned_with_normal_modes():
    with tarfile.open(
        fileobj=io.BytesIO(overlay_tar({"a/b.py": Entry(b"x"), "run": Entry(b"y", executable=True)}))
    ) as tar:
        modes = {m.name: (m.mode, m.uid) for m in tar.getmembers()}
    assert modes == {"a": (0o755, 0), "a/b.py": (0o644, 0), "run": (0o755, 0)}


def test_the_applied_change_reads_as_a_unified_diff():
    agent = dict(BASE) | {
        "calc/__init__.py": Entry(b"def neg(a):\n    return -a\n"),
        "new.bin": Entry(b"\xff\x00"),
    }
    del agent["setup.cfg"]
    patch = change_patch(BASE, compute_change(BASE, agent, []))
    assert "--- a/calc/__init__.py\n+++ b/calc/__init__.py\n" in patch
    assert "-    return a\n+    return -a\n" in patch
    assert "--- a/setup.cfg\n+++ /dev/null\n" in patch and "Binary or link new.bin written\n" in patch
