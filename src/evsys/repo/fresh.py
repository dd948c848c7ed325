"""Grading a repository row outside the agent's reach: its change, applied to a fresh tree in a fresh sandbox.

SWE-bench's model, over the `Sandbox` contract (the engine supplies both sandboxes):

1. the agent's working tree is copied out of its sandbox (bounded, `.git` packed last and never read) and
   compared on the host with the base tree — the repo cache's mirror (`git archive`), or for a row on its own
   image the fresh sandbox's pristine tree; `evsys.repo.change` drops what could change how tests run;
2. the fresh sandbox (same environment, no agent process ever ran in it) gets the base tree, root-owned, and
   the install commands; then the filtered change and the test patch (applied on the host to the base
   versions of the files it touches, with a throwaway git) are placed over it, root-owned, modes normalised;
3. `evsys.repo.runner` runs the listed tests as the sandbox's unprivileged user (who can write neither the
   tree nor the report), the repository last on `sys.path`, outcomes from a report written through a
   descriptor root opened — never from the log;
4. the host scores the outcomes (`evsys.repo.grade`) and writes `reward.json`, `tests.json`, `change.json`
   (what was written, deleted and dropped, and why) and `test_output.txt` into the trial's `verifier/`;
   the report's `integrity` (`integrity_of`: the runner's findings, and a `change_dropped` finding per file
   the change filter dropped) goes onto the trial's `TrialResult.integrity`.

No git runs in the sandbox; nothing of the agent's sandbox but its files' contents reaches the grading.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from evsys.records import CopyOutLimits, IntegrityFinding, IntegrityKind
from evsys.repo.cache import RepoCache
from evsys.repo.change import Entry, Tree, change_patch, compute_change, overlay_tar, read_tree, tree_of_tar
from evsys.repo.grade import report_from_outcomes, write_report
from evsys.repo.workspace import RepoWorkspace
from evsys.sandbox.base import HELPER_ENV, Sandbox, SandboxError
from evsys.sandbox.copyout import CUT_SHOWN

RUNNER = Path(__file__).with_name("runner.py")
# what runner.py loads beside itself: the hardened pytest process, its audit hook, the canaries
RUNNER_HELPERS = tuple(Path(__file__).with_name(f"runner_{n}.py") for n in ("child", "guard", "canaries"))
GRADE_DIR = "/evsys-grade"  # the runner and its config: root's, readable by the test user
OUT_DIR = "/evsys-grade/out"  # the reports and the log: root's alone (0700)
TEST_USER = "agent"  # a fresh sandbox's unprivileged user: no process of the agent ever ran as it there
TREE_LIMITS = CopyOutLimits(max_bytes=256 << 20, max_entries=200_000, max_depth=64, max_file_bytes=64 << 20)
OUT_LIMITS = CopyOutLimits(max_bytes=64 << 20, max_entries=64, max_depth=2, max_file_bytes=32 << 20)
_DIFF_PATHS = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.M)


class RepoGradingError(RuntimeError):
    """The grading could not run (a sandbox failed, the tree was over its bounds, the runner broke)."""


class TreeOverBounds(RepoGradingError):
    """The agent's tree is over the copy bounds: the reward is 0 and this is the cause (the agent's doing)."""


class RepoGradingTimeout(RepoGradingError, TimeoutError):
    """The tests ran past the verifier timeout."""


@dataclass
class RepoGrading:
    """What grading a repository row needs: its tests/ config and test patch, and where its tree comes from
    (`workspace` for a row placed from the repo cache; None for a row on its own image)."""

    config: dict
    test_patch: str
    workspace: RepoWorkspace | None = None
    env: dict[str, str] = field(default_factory=dict)
    timeout_sec: float | None = None

    @property
    def workdir(self) -> str:
        """Where the repository lives in both sandboxes."""
        return str(self.config["root"])

    @classmethod
    def from_tests_dir(cls, tests_dir: Path, workspace: RepoWorkspace | None, **kw: object) -> RepoGrading:
        """From a materialised task's `tests/` (config.json, test.patch)."""
        config = json.loads((tests_dir / "config.json").read_text())
        patch = (tests_dir / "test.patch").read_text() if (tests_dir / "test.patch").is_file() else ""
        return cls(config=config, test_patch=patch, workspace=workspace, **kw)  # type: ignore[arg-type]


def patch_paths(patch: str) -> list[str]:
    """Every path a patch names (both sides of each `diff --git` header)."""
    return sorted({p for pair in _DIFF_PATHS.findall(patch) for p in pair})


def row_test_files(test_patch: str, test_ids: list[str]) -> list[str]:
    """The test files of a row: those its test patch touches and those its test ids name."""
    named = {test.split("::", 1)[0] for test in test_ids if "::" in test or test.endswith(".py")}
    return sorted({*patch_paths(test_patch), *named})


async def _root(sandbox: Sandbox, command: str, what: str, **kw: object) -> str:
    result = await sandbox.exec(command, cwd="/", user="root", **kw)  # type: ignore[arg-type]
    if not result.ok:
        detail = (result.stderr.strip() or result.stdout.strip())[-800:] or f"exit code {result.exit_code}"
        raise RepoGradingError(f"{what} failed: {detail}")
    return result.stdout


async def copy_tree(sandbox: Sandbox, workdir: str) -> Tree:
    """The sandbox's tree at `workdir` (files and symlinks, no `.git`), bounded; `.git` is packed last so
    whatever it holds cannot push the sources out of the bounds."""
    names = await _root(sandbox, f"ls -A -- {shlex.quote(workdir)}", f"listing {workdir}", env=HELPER_ENV)
    first = [n for n in names.splitlines() if n and n != ".git" and "/" not in n]
    copied = await sandbox.copy_out(workdir, TREE_LIMITS, first=first)
    top = Path(workdir).name
    outside_git = [c for c in copied.cut if not c.startswith((f"{top}/.git/", f"{top}/.git:", ".git"))]
    if outside_git or copied.cut_count > CUT_SHOWN:
        raise TreeOverBounds(
            f"the working tree at {workdir} is over the copy bounds ({copied.cut_count} entries cut, e.g. "
            + "; ".join((outside_git or copied.cut)[:3])
            + ")"
        )
    return await asyncio.to_thread(read_tree, copied.reader(), strip_top=True)  # type: ignore[arg-type]


def apply_test_patch(base: Tree, patch: str) -> tuple[dict[str, Entry], list[str]]:
    """The files the test patch touches as it leaves them, applied to their base versions on the host (git
    in a directory evsys made): (written, deleted). `RepoGradingError` with git's errors when it fails."""
    paths = patch_paths(patch)
    if not patch.strip():
        return {}, []
    with tempfile.TemporaryDirectory(prefix="evsys-test-patch-") as tmp:
        tree = Path(tmp) / "tree"
        tree.mkdir()
        for path in paths:
            entry = base.get(path)
            if entry is not None and not entry.link:
                (tree / path).parent.mkdir(parents=True, exist_ok=True)
                (tree / path).write_bytes(entry.data)
        (Path(tmp) / "test.patch").write_text(patch)
        env = {
            "PATH": HELPER_ENV["PATH"],
            "HOME": tmp,
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CEILING_DIRECTORIES": tmp,
        }
        proc = subprocess.run(
            ["git", "apply", "--verbose", "../test.patch"], cwd=tree, env=env, capture_output=True, text=True
        )
        if proc.returncode != 0:
            errors = [line for line in (proc.stderr + proc.stdout).splitlines() if line.startswith("error:")]
            raise TestPatchError("the test patch does not apply: " + " ".join(errors[-2:]))
        written = {p: Entry((tree / p).read_bytes()) for p in paths if (tree / p).is_file()}
        return written, [p for p in paths if p not in written]


class TestPatchError(RepoGradingError):
    """The test patch does not apply to the base tree (the reward is 0 and this is the cause)."""


async def place_base(sandbox: Sandbox, grading: RepoGrading, data: bytes) -> None:
    """The base tree at the workdir, root-owned, then the row's install commands (as at trial start)."""
    q = shlex.quote(grading.workdir)
    command = f"rm -rf {q} && mkdir -p {q} && tar -x --no-same-owner -C {q} -f - && chmod -R go-w {q}"
    await _root(sandbox, command, "placing the base tree", stdin=data, env=HELPER_ENV)
    workspace = grading.workspace
    assert workspace is not None
    for command in workspace.install:
        await _root(
            sandbox,
            f"cd {q} && {command}",
            f"install command {command!r}",
            timeout=workspace.install_timeout_sec,
        )


async def place_for_grading(
    sandbox: Sandbox, grading: RepoGrading, files: dict[str, Entry], deletes: list[str], *, whole: bool
) -> None:
    """In one command, as root: the runner and its config at `GRADE_DIR` (an empty `OUT_DIR` of root's
    alone), and `files` at the workdir — the whole tree when `whole` (the workdir is replaced), else over the
    tree already there (`deletes` and every path written removed first). Root-owned, modes normalised."""
    root = grading.workdir.strip("/")
    q = shlex.quote(grading.workdir)
    entries = {f"{root}/{path}": entry for path, entry in files.items()}
    entries[GRADE_DIR.lstrip("/") + "/runner.py"] = Entry(RUNNER.read_bytes())
    for helper in RUNNER_HELPERS:
        entries[GRADE_DIR.lstrip("/") + "/" + helper.name] = Entry(helper.read_bytes())
    entries[GRADE_DIR.lstrip("/") + "/config.json"] = Entry(json.dumps(grading.config).encode())
    steps = [f"rm -rf {GRADE_DIR}", f"mkdir -p -m 0700 {OUT_DIR}"]
    if whole:
        steps += [f"rm -rf {q}", f"mkdir -p -m 0755 {q}"]
    elif gone := " ".join(shlex.quote(p) for p in sorted({*deletes, *files})):
        steps.append(f"(cd {q} && rm -rf -- {gone})")
    steps.append("tar -x --no-same-owner -p -C / -f -")
    data = await asyncio.to_thread(overlay_tar, entries)
    await _root(sandbox, " && ".join(steps), "placing the tree to grade", stdin=data, env=HELPER_ENV)


async def run_tests(sandbox: Sandbox, grading: RepoGrading) -> None:
    """The runner (placed by `place_for_grading`) as root, dropping to `TEST_USER` for the tests."""
    python = "$(command -v python3 || command -v python)"
    command = f'exec "{python}" -I {GRADE_DIR}/runner.py {GRADE_DIR}/config.json {OUT_DIR} --user {TEST_USER}'
    result = await sandbox.exec(command, cwd="/", user="root", env=grading.env, timeout=grading.timeout_sec)
    if result.timed_out:
        raise RepoGradingTimeout(f"the tests ran past the verifier timeout of {grading.timeout_sec:g} s")
    if not result.ok:
        detail = (result.stderr.strip() or result.stdout.strip())[-800:] or f"exit code {result.exit_code}"
        raise RepoGradingError(f"the test runner failed: {detail}")


async def collect_outcomes(sandbox: Sandbox, verifier_dir: Path) -> dict:
    """The runner's outcomes.json (and its log into `verifier_dir`), copied out bounded."""
    copied = await sandbox.copy_out(OUT_DIR, OUT_LIMITS, first=["outcomes.json", "test_output.txt"])
    tree = await asyncio.to_thread(read_tree, copied.reader(), strip_top=True)  # type: ignore[arg-type]
    log = tree.get("test_output.txt")
    if log is not None:
        await asyncio.to_thread((verifier_dir / "test_output.txt").write_bytes, log.data)
    try:
        data = json.loads(tree["outcomes.json"].data)
        assert isinstance(data, dict)
    except (KeyError, ValueError, AssertionError):
        raise RepoGradingError("the test runner left no readable outcomes.json") from None
    return data


@dataclass
class PreparedTree:
    """The grading sandbox's side that does not depend on the agent: the base tree, and whether it still
    has to be placed (`whole`: with the change, in one go) or is there already (with the install commands
    run, or a row's own image)."""

    base: Tree
    whole: bool


async def prepare_grading(
    fresh: Sandbox, grading: RepoGrading, cache: RepoCache | None = None
) -> PreparedTree:
    """Prepare `fresh` for grading (it may run while the agent does): for a row from the repo cache, the base
    tree from the mirror — placed now with the install commands when the row has some; for a row on its own
    image, the image's pristine tree copied out as the base. `RepoGradingError` when it fails."""
    try:
        if grading.workspace is None:
            return PreparedTree(await copy_tree(fresh, grading.workdir), whole=False)
        data = await asyncio.to_thread(
            (cache or RepoCache()).archive, grading.workspace.source, grading.workspace.commit
        )
        base = await asyncio.to_thread(tree_of_tar, data)
        if not grading.workspace.install:
            return PreparedTree(base, whole=True)
        await place_base(fresh, grading, data)  # install runs on the base, before any of the agent's files
        return PreparedTree(base, whole=False)
    except SandboxError as exc:
        raise RepoGradingError(f"the grading sandbox failed: {exc}") from exc


async def grade_repository(
    agent: Sandbox,
    fresh: Sandbox,
    grading: RepoGrading,
    verifier_dir: Path,
    prepared: PreparedTree | None = None,
    cache: RepoCache | None = None,
) -> dict:
    """Grade the agent's tree (in `agent`) in `fresh` (prepared by `prepare_grading`, now unless `prepared`
    is given); the report, also written into `verifier_dir` (reward.json, tests.json, change.json,
    change.patch, test_output.txt). `RepoGradingError` when it cannot run."""
    await asyncio.to_thread(verifier_dir.mkdir, parents=True, exist_ok=True)
    try:
        agent_tree = await copy_tree(agent, grading.workdir)
    except TreeOverBounds as exc:
        return await _cause_only(verifier_dir, str(exc))
    except SandboxError as exc:
        raise RepoGradingError(f"copying the agent's tree out: {exc}") from exc
    try:
        if prepared is None:
            prepared = await prepare_grading(fresh, grading, cache)
        base = prepared.base
        ids = [*grading.config["fail_to_pass"], *grading.config["pass_to_pass"]]
        grading.config["test_files"] = row_test_files(grading.test_patch, ids)
        change = await asyncio.to_thread(compute_change, base, agent_tree, grading.config["test_files"])
        await _write_json(verifier_dir / "change.json", change.summary())
        patch = await asyncio.to_thread(change_patch, base, change)
        await asyncio.to_thread((verifier_dir / "change.patch").write_text, patch)
        try:
            patched, removed = await asyncio.to_thread(apply_test_patch, base, grading.test_patch)
        except TestPatchError as exc:
            return await _cause_only(verifier_dir, str(exc))
        deletes = [*change.deletes, *removed]
        if prepared.whole:
            gone = set(deletes)
            files = {p: e for p, e in {**base, **change.writes, **patched}.items() if p not in gone}
        else:
            files = {**change.writes, **patched}
        await place_for_grading(fresh, grading, files, deletes, whole=prepared.whole)
        await run_tests(fresh, grading)
        outcomes = await collect_outcomes(fresh, verifier_dir)
    except SandboxError as exc:
        raise RepoGradingError(f"the grading sandbox failed: {exc}") from exc
    finally:
        await _kill_quietly(fresh)
    report = report_from_outcomes(outcomes, grading.config["fail_to_pass"], grading.config["pass_to_pass"])
    report["integrity"] = dropped_findings(change.dropped) + report["integrity"]
    await asyncio.to_thread(write_report, verifier_dir, report)
    return report


def dropped_findings(dropped: dict[str, str]) -> list[dict[str, str]]:
    """A `change_dropped` finding per file of the agent's change that grading left out (path: reason)."""
    return [
        {"kind": IntegrityKind.CHANGE_DROPPED.value, "evidence": f"{path}: {why}", "source": "repo.change"}
        for path, why in sorted(dropped.items())
    ]


def integrity_of(report: dict) -> list[IntegrityFinding]:
    """The findings of a grading report (`report["integrity"]`); an unknown kind is kept as `other`."""
    kinds = {kind.value for kind in IntegrityKind}
    return [
        IntegrityFinding(
            kind=IntegrityKind(f["kind"]) if f.get("kind") in kinds else IntegrityKind.OTHER,
            evidence=str(f.get("evidence", "")),
            source=str(f.get("source", "repo.runner")),
        )
        for f in report.get("integrity") or []
        if isinstance(f, dict)
    ]


async def _cause_only(verifier_dir: Path, cause: str) -> dict:
    """A grading that could not test: reward 0 and the cause, written into `verifier_dir`."""
    report = {"reward": 0.0, "cause": cause, "summary": cause, "tests": {}, "missing": []}
    await asyncio.to_thread(write_report, verifier_dir, report)
    return report


async def _write_json(path: Path, data: object) -> None:
    await asyncio.to_thread(path.write_text, json.dumps(data, indent=2) + "\n")


async def _kill_quietly(sandbox: Sandbox) -> None:
    """Whatever the tests left running in the grading sandbox ends with the grading."""
    try:
        await sandbox.kill_processes()
    except SandboxError:
        pass
