"""The suite's two tiers (a plugin of the whole suite, see tests/conftest.py).

A test is *heavy* when it needs a real sandbox, model engine, daemon, cluster, server process or another
virtualenv. The fixtures that start those things are the single point that says so: a test whose fixture
closure holds one of HEAVY_FIXTURES gets that fixture's `needs_*` mark. A test that starts such a thing
itself carries the `needs_*` mark explicitly (on the test, or `pytestmark` on its module). Every `needs_*`
mark implies `heavy`.

`pytest --fast` (`make test-fast`) is the fast tier: it deselects the heavy tests (and those marked `slow`)
and guards the rest, so the
tier stays honest as tests are added: a test in it that starts a local sandbox, loads a model engine or runs
a process of those kinds (bwrap, evsysd, dockerd, Ray, a browser, an `evsys` command, another virtualenv's
python) fails, naming the marks that would move it to the heavy tier. Without `--fast` nothing is guarded.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest

NEEDS: dict[str, str] = {
    "needs_sandbox": "a real sandbox (bubblewrap, or a cloud backend's stand-in over it)",
    "needs_model": "a real model engine (a tiny model loaded with torch)",
    "needs_docker": "a private dockerd",
    "needs_ray": "a Ray cluster",
    "needs_process": "a server, browser or `evsys` command as a separate process",
    "needs_venv": "another virtualenv (Harbor's, verifiers', OpenEnv's)",
    "needs_images": "the image tools (buildah, skopeo, mmdebstrap) and their base image",
}

# The fixtures that start a real thing, by the mark a test using them gets (by name: a test directory that
# defines a fixture of one of these names for something light must rename it).
HEAVY_FIXTURES: dict[str, tuple[str, ...]] = {
    "needs_sandbox": (
        "sandbox",  # tests/sandbox, tests/security, the conformance plugin, ...
        "make_sandbox",
        "sandbox_backend",
        "slot_backend",
        "daytona_standin",
        "e2b_standin",
        "modal_standin",
        "backend",  # tests/parity: local or docker
        "jobs_dir",  # tests/viewer: real oracle jobs
    ),
    "needs_model": (
        "tiny_model_dir",
        "tiny_client",
        "tiny_engine_client",
        "long_context_client",
        "tiny_server",
        "proxy",
        "harness_proxy",
        "make_adapter",
        "math_model_dir",
        "math_client",
        "example",  # tests/train: torch and the GRPO example
    ),
    "needs_docker": ("dockerd", "docker_base", "docker_session", "docker_env", "parity_docker_base"),
    "needs_ray": ("ray_cluster",),
    "needs_process": ("server", "strict_server", "viewer_url", "browser", "page"),
    "needs_venv": ("harbor",),
    "needs_images": ("image_storage", "images", "image_tools"),
}
# What the fast tier deselects: the heavy tests, and the slow ones (seconds each, e.g. a pytest run in a
# subprocess).
FAST_TIER_LEAVES_OUT = ("heavy", "slow")
FIXTURE_NEEDS = {fixture: mark for mark, fixtures in HEAVY_FIXTURES.items() for fixture in fixtures}

# Programs a fast test may not start (by file name), and what the heavy tier has that they need.
HEAVY_PROGRAMS: dict[str, str] = {
    **dict.fromkeys(("bwrap", "evsysd", "slirp4netns", "spawner.py"), "needs_sandbox"),
    **dict.fromkeys(("dockerd", "docker", "containerd"), "needs_docker"),
    **dict.fromkeys(("ray", "raylet", "gcs_server"), "needs_ray"),
    **dict.fromkeys(("evsys", "chromium", "chromium-browser", "uvicorn"), "needs_process"),
    **dict.fromkeys(("buildah", "skopeo", "mmdebstrap"), "needs_images"),
}
OTHER_VENVS = (".venv-harbor", ".venv-verifiers", ".venv-tinker", ".openenv-site")


class HeavyInFastTier(RuntimeError):
    """A test of the fast tier started something only the heavy tier may start."""


def pytest_addoption(parser: pytest.Parser) -> None:
    """`--fast`: run the fast tier."""
    parser.addoption(
        "--fast",
        action="store_true",
        help="the fast tier: deselect heavy and slow tests (tests/tiers.py) and fail a test that starts a "
        "sandbox, model engine, daemon, cluster or server process",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Register the marks; with --fast, guard this process."""
    config.addinivalue_line("markers", "heavy: needs a real sandbox, model, daemon, cluster or process")
    for mark, what in NEEDS.items():
        config.addinivalue_line("markers", f"{mark}: needs {what} (implies heavy)")
    if config.getoption("fast"):
        config.stash[_GUARD] = _Guard()


def pytest_unconfigure(config: pytest.Config) -> None:
    """Take the guard off again."""
    guard = config.stash.get(_GUARD, None)
    if guard is not None:
        guard.remove()


@pytest.hookimpl(tryfirst=True)  # before `-m` selects: `-m heavy`, `-m "not needs_docker"` see the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each item by the heavy fixtures it uses; with --fast, deselect the heavy ones."""
    for item in items:
        needs = {FIXTURE_NEEDS[name] for name in getattr(item, "fixturenames", ()) if name in FIXTURE_NEEDS}
        marked = {mark.name for mark in item.iter_markers() if mark.name.startswith("needs_")}
        if marked - NEEDS.keys():
            raise pytest.UsageError(
                f"{item.nodeid}: unknown marks {sorted(marked - NEEDS.keys())} (tests/tiers.py)"
            )
        needs.update(marked)
        for mark in sorted(needs):
            item.add_marker(mark)
        if needs:
            item.add_marker("heavy")
    if not config.getoption("fast"):
        return
    left_out = [item for item in items if any(item.get_closest_marker(m) for m in FAST_TIER_LEAVES_OUT)]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if item not in set(left_out)]


@pytest.fixture(autouse=True)
def _fast_tier_guard(request: pytest.FixtureRequest) -> Iterator[None]:
    """With --fast: fail the test if it started something of the heavy tier (even if it caught the error)."""
    guard = request.config.stash.get(_GUARD, None)
    if guard is None:
        yield
        return
    seen = len(guard.violations)
    yield
    if len(guard.violations) > seen:
        pytest.fail("\n".join(guard.violations[seen:]), pytrace=False)


def heavy_program(argv: Any) -> str | None:
    """The `needs_*` mark a command line needs, or None when a fast test may run it."""
    words = argv.split() if isinstance(argv, (str, bytes)) else [os.fsdecode(a) for a in argv]
    words = [os.fsdecode(w) for w in words]
    if not words:
        return None
    if any(venv in word for word in words for venv in OTHER_VENVS):
        return "needs_venv"
    for index, word in enumerate(words):
        if word == "-m" and index + 1 < len(words) and words[index + 1].split(".")[0] in ("evsys", "ray"):
            return "needs_process"
        if word == "-c" and index + 1 < len(words) and "evsys.cli" in words[index + 1]:
            return "needs_process"
    program = os.path.basename(words[0])
    script = os.path.basename(words[1]) if len(words) > 1 else ""
    return HEAVY_PROGRAMS.get(program) or HEAVY_PROGRAMS.get(script)


class _Guard:
    """The patches --fast puts on this process: the local sandbox's start and spawner, the model engine's
    loader, tiny-model training, and subprocess.Popen (under asyncio's subprocesses too). Each records a
    violation and raises."""

    def __init__(self) -> None:
        from evsys.model.local import engine
        from evsys.sandbox.local.sandbox import LocalSandbox
        from evsys.sandbox.local.spawn import _Spawner
        from evsys.testing import tiny_model

        self.violations: list[str] = []
        self._undo: list[Callable[[], None]] = []
        self._wrap(LocalSandbox, "start", "needs_sandbox", "started a local sandbox")
        self._wrap(_Spawner, "request", "needs_sandbox", "asked the sandbox spawner for a process")
        self._wrap(engine, "load_model_and_tokenizer", "needs_model", "loaded a model engine")
        self._wrap(tiny_model, "_train", "needs_model", "trained a tiny model (not built yet)")
        original = subprocess.Popen.__init__

        def popen(popen_self: subprocess.Popen, args: Any, *rest: Any, **kw: Any) -> None:
            mark = heavy_program(args)
            if mark is not None:
                self.refuse(mark, f"ran {args!r}")
            original(popen_self, args, *rest, **kw)

        self._set(subprocess.Popen, "__init__", popen)

    def refuse(self, mark: str, what: str) -> None:
        """Record and raise: a fast test did `what`, which needs `mark`."""
        message = f"fast tier: this test {what}; mark it {mark} (tests/tiers.py) or use a heavy fixture"
        self.violations.append(message)
        raise HeavyInFastTier(message)

    def _wrap(self, owner: Any, name: str, mark: str, what: str) -> None:
        def refused(*args: Any, **kwargs: Any) -> Any:
            self.refuse(mark, what)

        self._set(owner, name, refused)

    def _set(self, owner: Any, name: str, value: Any) -> None:
        original = owner.__dict__[name]
        setattr(owner, name, value)
        self._undo.append(lambda: setattr(owner, name, original))

    def remove(self) -> None:
        """Put every patched attribute back."""
        for undo in reversed(self._undo):
            undo()


_GUARD = pytest.StashKey[_Guard]()
