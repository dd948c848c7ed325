"""`ScriptVerifier`: Harbor's reward semantics — run `/tests/test.sh`, read the reward file it writes.

Order: place the task's `tests/` at `/tests` (only now, after the agent is done) beside an empty
`/logs/verifier` the verifier user may write, run `/bin/bash /tests/test.sh > /logs/verifier/test-stdout.txt
2>&1` (the shell by absolute path, never the one on the task's PATH) with the verifier env and timeout (its
exit code is ignored). On a backend with `Capability.PRIVATE_VERIFIER` (the local one) `Sandbox.run_verifier`
does all of it in places of the verifier's own: fresh /tests, /logs/verifier and /tmp in a mount namespace
that the agent's surviving processes, root ones included, cannot see or reach, so they can neither write the
reward nor swap the tests nor plant links in its /tmp. Elsewhere the tests are placed in the sandbox's own
file system (`_place_tests`). Then `/logs/verifier` is copied to the host and the reward is parsed there.

Speed: placing the tests and clearing the stale logs is one request the local sandbox's daemon carries out
itself (`replace_tree`: no rm, find or tar process), running test.sh is one command, and the engine copies all
of `/logs` out in one go between the two halves of the chain link (`run_in_sandbox`, `verify`);
`verify_sandbox` does both for standalone use.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
import shutil
from pathlib import Path
from typing import Any

from evsys.records import ExecResult
from evsys.records.integrity import IntegrityFinding, IntegrityKind
from evsys.sandbox.base import SHELL, TESTS_DIR, VERIFIER_LOGS_DIR, Capability, Sandbox, SandboxError
from evsys.util.packing import pack_directory
from evsys.verify.base import VerifierError, VerifierResult, VerifierTimeoutError, read_reward_files

__all__ = ["ScriptVerifier", "pack_directory", "places_written"]

_OUTPUT = f"{VERIFIER_LOGS_DIR}/test-stdout.txt"  # test.sh's exit code is ignored: the reward file decides
_PRIVATE_SETUP = "evsys: cannot set up the verifier's private mounts"  # native/verifier.c
_FINDING = "evsys-integrity: "  # native/places.c: `<kind> <path>`, one a line, before the tests' output
_WARNING = "evsys: warning: "  # native/tmpview.c: the agent's /tmp copied only in part (no overlay there)
logger = logging.getLogger(__name__)


class ScriptVerifier:
    """Runs a task's `tests/test.sh` in the sandbox and reads `reward.json` / `reward.txt`; a chain link."""

    name = "tests/test.sh"
    needs_sandbox = True

    def __init__(
        self,
        tests_dir: Path,
        *,
        timeout_sec: float | None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        workdir: str | None = None,
    ) -> None:
        self.tests_dir = Path(tests_dir)
        self.timeout_sec = timeout_sec
        self.env = dict(env or {})
        self.user = user or "root"
        self.workdir = workdir

    async def run_tests(self, sandbox: Sandbox) -> ExecResult:
        """Place tests, run test.sh: `VerifierTimeoutError` past the timeout, `VerifierError` on failure."""
        if not (self.tests_dir / "test.sh").is_file():
            raise VerifierError(f"{self.tests_dir / 'test.sh'} does not exist")
        tests = await asyncio.to_thread(pack_directory, self.tests_dir)
        argv = [SHELL, f"{TESTS_DIR}/test.sh"]  # by absolute path: never a `bash` on the task's PATH
        options: dict[str, Any] = {"user": self.user, "cwd": self.workdir, "env": self.env}
        try:
            if sandbox.supports(Capability.PRIVATE_VERIFIER):
                result = await sandbox.run_verifier(
                    argv, tests=tests, output_file=_OUTPUT, timeout=self.timeout_sec, **options
                )
                if result.exit_code == 126 and _PRIVATE_SETUP in result.stderr:
                    raise VerifierError(result.stderr.strip()[-500:])
            else:
                await self._place_tests(sandbox, tests)
                result = await sandbox.exec_program(
                    argv, output_file=_OUTPUT, timeout=self.timeout_sec, **options
                )
        except SandboxError as exc:
            raise VerifierError(f"the sandbox failed while verifying: {exc}") from exc
        if result.timed_out:
            raise VerifierTimeoutError(
                f"tests/test.sh ran past the verifier timeout of {self.timeout_sec:g} s"
            )
        return result

    async def _place_tests(self, sandbox: Sandbox, tests: bytes) -> None:
        """A backend without private verifier places: the tests at /tests and an emptied /logs/verifier in
        the sandbox's own file system (handed to the verifier user unless that is root)."""
        try:
            await sandbox.replace_tree(tests, TESTS_DIR, empty=[VERIFIER_LOGS_DIR])
        except SandboxError as exc:
            raise VerifierError(f"placing the tests at {TESTS_DIR} failed: {exc}") from None
        if self.user != "root":
            await _hand_over_logs(sandbox, self.user)

    @staticmethod
    async def read_rewards(verifier_dir: Path) -> VerifierResult:
        """Parse the rewards from a host copy of /logs/verifier."""
        return await asyncio.to_thread(read_reward_files, verifier_dir)

    async def run_in_sandbox(self, ctx: Any) -> None:
        """The chain's in-sandbox half: place and run the tests (`VerifierError` when there is no
        reward); what the agent wrote to the verifier's places goes onto `ctx.integrity`."""
        if ctx.sandbox is None:
            raise VerifierError("the sandbox is gone: the tests cannot run")
        result = await self.run_tests(ctx.sandbox)
        ctx.integrity.extend(places_written(result.stderr))
        for line in result.stderr.splitlines():
            if line.startswith(_WARNING):
                logger.warning("verifying %s: %s", self.tests_dir, line.removeprefix(_WARNING))

    async def verify(self, ctx: Any) -> VerifierResult:
        """The chain's host-side half: the rewards in the host copy of /logs/verifier."""
        return await self.read_rewards(ctx.verifier_dir)

    async def verify_sandbox(self, sandbox: Sandbox, logs_dir: Path) -> VerifierResult:
        """Standalone use: run the tests, copy /logs/verifier to `logs_dir`, return the rewards (or raise
        a `VerifierError`)."""
        timeout: VerifierTimeoutError | None = None
        try:
            await self.run_tests(sandbox)
        except VerifierTimeoutError as exc:
            timeout = exc
        await _download_logs(sandbox, logs_dir)
        if timeout is not None:
            raise timeout
        return await self.read_rewards(logs_dir)


def places_written(stderr: str) -> list[IntegrityFinding]:
    """The findings a private verification run reported before its tests ran (native/places.c): each verifier
    place the agent wrote (/tests, /logs/verifier, a link in /tmp naming one, /etc/ld.so.preload)."""
    findings = []
    for line in stderr.splitlines():
        kind, _, path = line.removeprefix(_FINDING).partition(" ")
        if line.startswith(_FINDING) and path:
            known = IntegrityKind(kind) if kind in IntegrityKind._value2member_map_ else IntegrityKind.OTHER
            findings.append(IntegrityFinding(kind=known, evidence=path, source="verifier"))
    return findings


async def _hand_over_logs(sandbox: Sandbox, user: str) -> None:
    """Make the (just emptied) /logs/verifier belong to `user`, the user test.sh runs as."""
    command = f"/bin/chown {shlex.quote(user)}: {VERIFIER_LOGS_DIR}"
    try:
        result = await sandbox.exec(command, cwd="/", user="root")
    except SandboxError as exc:
        raise VerifierError(
            f"handing {VERIFIER_LOGS_DIR} to the verifier user {user!r} failed: {exc}"
        ) from None
    if not result.ok:
        detail = result.stderr.strip()[-300:] or f"exit code {result.exit_code}"
        raise VerifierError(f"handing {VERIFIER_LOGS_DIR} to the verifier user {user!r} failed: {detail}")


async def _download_logs(sandbox: Sandbox, logs_dir: Path) -> None:
    """Replace `logs_dir` with a copy of the sandbox's /logs/verifier."""
    await asyncio.to_thread(shutil.rmtree, logs_dir, True)
    try:
        await sandbox.download(VERIFIER_LOGS_DIR, logs_dir)
    except SandboxError as exc:
        raise VerifierError(f"could not copy {VERIFIER_LOGS_DIR} out of the sandbox: {exc}") from exc
    await asyncio.to_thread(logs_dir.mkdir, parents=True, exist_ok=True)
