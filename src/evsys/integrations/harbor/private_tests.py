"""Harbor's verifier step in the verifier's private places (`Sandbox.run_verifier`), as under `evsys run`.

Harbor (0.26, `harbor.verifier.verifier.Verifier.verify`) grades a trial through plain environment calls: an
`exec` removing the old reward files, `upload_dir(tests/, "/tests")`, `exec("chmod +x /tests/test.sh")` as
root, `exec("(/tests/test.sh) > /logs/verifier/test-stdout.txt 2>&1")`, then `download_dir("/logs/verifier")`.
Run as they come, the tests would sit in the sandbox's own /tests and write the sandbox's own /logs/verifier,
where a process the agent left running can swap the one and forge the other. On a backend with private
verifier places `EvsysEnvironment` recognises these calls instead: the upload is kept on the host
(`StagedTests`), the chmod is applied to that copy, and the tests command becomes one verification run with
the staged tests at a private /tests, a private /logs/verifier (which `download_dir` then reads) and /tmp.
Any other command arriving while tests are staged means a Harbor that grades differently: the staged tests
are then uploaded as Harbor asked (unprotected, with a warning), so grading still works.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from evsys.records import ExecResult
from evsys.sandbox.base import TESTS_DIR, Capability, Sandbox
from evsys.util.packing import pack_directory
from evsys.verify.script import places_written

# what build_execution_command(test_script, stdout_path=..., task_os=LINUX) makes of Harbor's paths
TESTS_CALL = re.compile(r"\((?P<script>/tests/[\w./-]+)\) > (?P<output>/logs/verifier/[\w.-]+) 2>&1")
CHMOD_CALL = re.compile(r"chmod \+x (?P<script>/tests/[\w./-]+)")


def private_tests_possible(sandbox: Sandbox, target_dir: str) -> bool:
    """True when an upload to `target_dir` is Harbor's tests and `sandbox` can keep them private."""
    return target_dir.rstrip("/") == TESTS_DIR and sandbox.supports(Capability.PRIVATE_VERIFIER)


class StagedTests:
    """The tests Harbor uploaded, held on the host until its tests command runs them privately."""

    def __init__(self) -> None:
        self._dir: Path | None = None

    @property
    def pending(self) -> bool:
        """True while tests are staged and have not run."""
        return self._dir is not None

    async def stage(self, source: Path) -> None:
        """Merge `source`'s contents into the staged tests (Harbor uploads shared and step tests in turn)."""
        if self._dir is None:
            self._dir = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="evsys-harbor-tests-"))
        await asyncio.to_thread(shutil.copytree, source, self._dir, dirs_exist_ok=True, symlinks=True)

    def chmod(self, command: str) -> bool:
        """Apply Harbor's `chmod +x /tests/...` to the staged copy; False when `command` is not that."""
        match = CHMOD_CALL.fullmatch(command.strip())
        staged = self._staged_path(match["script"]) if match else None
        if staged is None or not staged.is_file():
            return False
        staged.chmod(staged.stat().st_mode | 0o111)
        return True

    def tests_call(self, command: str) -> tuple[str, str] | None:
        """(script, output file) when `command` is Harbor's tests command for a staged script."""
        match = TESTS_CALL.fullmatch(command.strip())
        if match is None or self._staged_path(match["script"]) is None:
            return None
        return match["script"], match["output"]

    async def run(
        self, sandbox: Sandbox, call: tuple[str, str], **options: Any
    ) -> tuple[ExecResult, list[str]]:
        """Run the staged tests as one verification run (`options`: user, cwd, env, timeout); its result
        and what the agent wrote to the verifier's places (one line each)."""
        script, output = call
        staged = self._take()
        try:
            tests = await asyncio.to_thread(pack_directory, staged)
        finally:
            await asyncio.to_thread(shutil.rmtree, staged, True)
        result = await sandbox.run_verifier([script], tests=tests, output_file=output, **options)
        findings = [f"{f.kind.value}: {f.evidence}" for f in places_written(result.stderr)]
        return result, findings

    async def flush(self, sandbox: Sandbox) -> None:
        """Upload the staged tests to the sandbox's own /tests, as Harbor asked."""
        staged = self._take()
        try:
            await sandbox.upload(staged, TESTS_DIR)
        finally:
            await asyncio.to_thread(shutil.rmtree, staged, True)

    async def discard(self) -> None:
        """Forget staged tests that never ran (the environment stops)."""
        if self._dir is not None:
            await asyncio.to_thread(shutil.rmtree, self._take(), True)

    def _take(self) -> Path:
        staged, self._dir = self._dir, None
        assert staged is not None, "no tests are staged"
        return staged

    def _staged_path(self, script: str) -> Path | None:
        if self._dir is None:
            return None
        relative = Path(script).relative_to(TESTS_DIR)
        return None if ".." in relative.parts else self._dir / relative
