"""The agent's change to a repository, computed on the host, and what of it may reach the grading tree.

`read_tree` reads a tar of a working tree (the base tree streamed from the repo cache's mirror, or a bounded
copy of the agent's tree) into path -> `Entry`, skipping every `.git` (the agent's git metadata is never
read). `compute_change` compares file contents in Python (untracked files included) and drops, with a reason
each, what could change how the tests run rather than what they test:

- the test files (those the test patch touches and those the test ids name) and every `conftest.py`;
- pytest's configuration: `pytest.ini`, `.pytest.ini`, `tox.ini`, and a `pyproject.toml` / `setup.cfg`
  whose pytest section (`[tool.pytest...]`, `[tool:pytest]`) changed;
- `*.pth`, `sitecustomize` / `usercustomize`, compiled bytecode (`__pycache__`, `*.pyc`), package metadata
  (`*.egg-info`, `*.dist-info`: entry points load pytest plugins);
- a new top-level module (a file or package where Python or pytest may put its directory on `sys.path`) named
  like the standard library, pytest or its plugins;
- a symlink leading out of the tree.
"""

from __future__ import annotations

import configparser
import difflib
import io
import posixpath
import sys
import tarfile
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import IO

SHADOWED = frozenset(sys.stdlib_module_names) | {
    "pytest",
    "_pytest",
    "py",
    "pluggy",
    "iniconfig",
    "packaging",
    "exceptiongroup",
    "tomli",
    "setuptools",
    "pkg_resources",
    "_distutils_hack",
    "pip",
    "conftest",
}
PYTEST_INI = frozenset({"pytest.ini", ".pytest.ini", "tox.ini"})
RUNTIME_HOOKS = frozenset({"sitecustomize", "usercustomize"})


@dataclass(frozen=True)
class Entry:
    """A file (its bytes) or a symlink (its target) of a working tree; `executable` for files."""

    data: bytes
    link: bool = False
    executable: bool = False


Tree = dict[str, Entry]


@dataclass
class Change:
    """The agent's change as it reaches the grading tree: files to write, paths to delete, and what was
    dropped (path -> reason)."""

    writes: dict[str, Entry] = field(default_factory=dict)
    deletes: list[str] = field(default_factory=list)
    dropped: dict[str, str] = field(default_factory=dict)

    def summary(self) -> dict:
        """What `verifier/change.json` records."""
        return {"written": sorted(self.writes), "deleted": sorted(self.deletes), "dropped": self.dropped}


def read_tree(stream: IO[bytes], *, strip_top: bool) -> Tree:
    """Files and symlinks of a tar (`strip_top`: its entries sit under one top directory, as a sandbox copy
    gives), skipping everything under any `.git`."""
    tree: Tree = {}
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            parts = [p for p in member.name.split("/") if p not in ("", ".")]
            if strip_top:
                parts = parts[1:]
            if not parts or ".git" in parts or ".." in parts:
                continue
            path = "/".join(parts)
            if member.issym():
                tree[path] = Entry(member.linkname.encode(), link=True)
            elif member.isfile():
                handle = tar.extractfile(member)
                data = handle.read() if handle is not None else b""
                tree[path] = Entry(data, executable=bool(member.mode & 0o111))
    return tree


def tree_of_tar(data: bytes, *, strip_top: bool = False) -> Tree:
    """`read_tree` of tar bytes."""
    return read_tree(io.BytesIO(data), strip_top=strip_top)


def _pytest_section(name: str, data: bytes | None) -> object:
    """The pytest part of a pyproject.toml / setup.cfg (a marker object when it does not parse)."""
    if data is None:
        return None
    text = data.decode("utf-8", "replace")
    try:
        if name == "pyproject.toml":
            return tomllib.loads(text).get("tool", {}).get("pytest")
        parser = configparser.RawConfigParser()
        parser.read_string(text)
        return {s: dict(parser.items(s)) for s in ("tool:pytest", "pytest") if parser.has_section(s)} or None
    except (tomllib.TOMLDecodeError, configparser.Error, AttributeError):
        return "unparseable"


def _top_level_names(path: str, tree: Tree) -> Iterable[str]:
    """Module names `path` can be imported as from a directory that may be on sys.path: each component
    whose directory is not a package (no `__init__.py`), its suffix stripped."""
    parts = path.split("/")
    for i, part in enumerate(parts):
        parent = "/".join(parts[:i])
        if not i or f"{parent}/__init__.py" not in tree:
            yield part.split(".", 1)[0]


def drop_reason(path: str, base: Tree, agent: Tree, test_files: set[str]) -> str | None:
    """Why the agent's change to `path` must not reach the grading tree, or None to keep it."""
    parts = path.split("/")
    name = parts[-1]
    if path in test_files:
        return "a test file"
    if name == "conftest.py":
        return "conftest.py changes how pytest runs"
    if name in PYTEST_INI:
        return "pytest configuration"
    if name in ("pyproject.toml", "setup.cfg"):
        old, new = (t.get(path) for t in (base, agent))
        before = _pytest_section(name, old.data if old else None)
        if before != _pytest_section(name, new.data if new else None):
            return "its pytest configuration changed"
    if name.endswith(".pth") or any(p.split(".", 1)[0] in RUNTIME_HOOKS for p in parts):
        return "runs at interpreter start"
    if "__pycache__" in parts or name.endswith((".pyc", ".pyo")):
        return "compiled bytecode"
    if any(p.endswith((".egg-info", ".dist-info", ".egg-link")) for p in parts):
        return "package metadata (entry points load pytest plugins)"
    if path not in base:
        shadow = next(
            (n for n in _top_level_names(path, agent) if n in SHADOWED or n.startswith("pytest_")), None
        )
        if shadow is not None:
            return f"a new top-level module {shadow!r} shadows the standard library or pytest"
    entry = agent.get(path)
    if entry is not None and entry.link:
        target = entry.data.decode("utf-8", "replace")
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
        if target.startswith("/") or resolved == ".." or resolved.startswith("../"):
            return "a symlink out of the tree"
    return None


def compute_change(base: Tree, agent: Tree, test_files: Iterable[str]) -> Change:
    """The agent's change against `base` (added, modified and deleted files), filtered by `drop_reason`."""
    tests = set(test_files)
    change = Change()
    for path in sorted(base.keys() | agent.keys()):
        old, new = base.get(path), agent.get(path)
        if old == new:
            continue
        reason = drop_reason(path, base, agent, tests)
        if reason is not None:
            change.dropped[path] = reason
        elif new is None:
            change.deletes.append(path)
        else:
            change.writes[path] = new
    return change


def overlay_tar(writes: dict[str, Entry]) -> bytes:
    """A tar of `writes` (root-owned, files 0644 or 0755, directories 0755): what is placed over the tree."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs = sorted({posixpath.dirname(p) for p in writes} - {""})
        for directory in sorted(
            {"/".join(d.split("/")[: i + 1]) for d in dirs for i in range(d.count("/") + 1)}
        ):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for path, entry in sorted(writes.items()):
            info = tarfile.TarInfo(path)
            if entry.link:
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, entry.data.decode(), 0o777
                tar.addfile(info)
                continue
            info.size, info.mode = len(entry.data), 0o755 if entry.executable else 0o644
            tar.addfile(info, io.BytesIO(entry.data))
    return out.getvalue()


MAX_PATCH_CHARS = 4 << 20


def change_patch(base: Tree, change: Change) -> str:
    """The change as a unified diff against `base` (what the grading applied, for reading; binary files and
    links named only), cut at `MAX_PATCH_CHARS`."""
    parts: list[str] = []
    for path in sorted({*change.writes, *change.deletes}):
        old, new = base.get(path), change.writes.get(path)
        texts = [_text(e) for e in (old, new)]
        if any(t is None for t, e in zip(texts, (old, new), strict=True) if e is not None):
            parts.append(f"Binary or link {path} {'deleted' if new is None else 'written'}\n")
            continue
        before, after = ((t or "").splitlines(keepends=True) for t in texts)
        a, b = (f"a/{path}" if old else "/dev/null"), (f"b/{path}" if new else "/dev/null")
        parts.append("".join(difflib.unified_diff(before, after, a, b)))
    text = "".join(parts)
    return text if len(text) <= MAX_PATCH_CHARS else text[:MAX_PATCH_CHARS] + "\n[... cut ...]\n"


def _text(entry: Entry | None) -> str | None:
    if entry is None or entry.link:
        return None
    try:
        return entry.data.decode("utf-8")
    except UnicodeDecodeError:
        return None
