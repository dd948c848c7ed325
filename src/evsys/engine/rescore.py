"""`evsys rescore JOB [--tests DIR]`: the verifier run again on each trial's kept final filesystem.

For every trial that kept its state (`evsys run --keep-state`, evsys.engine.trial.keep) a fresh sandbox of the
task's environment is started, the state applied (files written, deletions made, the agent's files given
back to the agent user) as the agent phase of a `Trial`, and the task's verifier chain — or one with the
corrected tests of `--tests DIR` — runs through the same verifier path as in the job. Its files (config.json,
result.json, verifier/ ...) go to `<trial>/rescore/<stamp>/`; the trial's own files are never touched.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel, Field

from evsys.agent.base import Agent, AgentContext, AgentError, AgentResult
from evsys.engine.config import JobConfig, TrialConfig
from evsys.engine.spec import TaskRef, TrialSpec
from evsys.engine.store import JobStore, read_job_config
from evsys.engine.trial.keep import load_kept_state, plain_tar
from evsys.engine.trial.run import Trial
from evsys.records import TrialResult
from evsys.records.state import KeptState
from evsys.sandbox.base import HELPER_ENV, Sandbox, SandboxError
from evsys.task.loader import TaskLoadError, load_task
from evsys.task.models import Task

RESCORE_DIR = "rescore"
CHOWN_AGENT = "xargs -0 -r chown -h agent:agent --"


class RescoreRow(BaseModel):
    """One trial of a rescore: its old and new reward, where the new result is, or why it was skipped."""

    trial_name: str
    old_reward: float | None = None
    new_reward: float | None = None
    new_failure: str | None = None
    result_dir: Path | None = None
    skipped: str | None = Field(None, description="Why the trial was not rescored.")


class RescoreStore(JobStore):
    """A job store whose one trial lives at its root (`<trial>/rescore/<stamp>/`)."""

    def trial_dir(self, trial_name: str) -> Path:
        """The store's root, whatever the trial's name."""
        return self.job_dir


class KeptStateAgent(Agent):
    """The agent phase of a rescore: the trial's kept state applied to the fresh sandbox."""

    name = "kept-state"
    model_use = "none"

    def __init__(self, trial_dir: Path, manifest: KeptState) -> None:
        self.trial_dir, self.manifest = trial_dir, manifest

    async def setup(self, sandbox: Sandbox, ctx: AgentContext) -> None:
        """Nothing to set up."""

    async def run(self, instruction: str, sandbox: Sandbox, ctx: AgentContext) -> AgentResult:
        """Apply the kept state; `AgentError` naming what failed."""
        try:
            await apply_kept_state(sandbox, self.trial_dir, self.manifest)
        except (SandboxError, OSError) as exc:
            raise AgentError(f"applying the kept state of {self.trial_dir.name}: {exc}") from None
        return AgentResult(metadata={"kept_state": self.manifest.model_dump(include={"size", "entries"})})


async def apply_kept_state(sandbox: Sandbox, trial_dir: Path, manifest: KeptState) -> None:
    """Deletions and replaced directories removed, the archive extracted at the root, the agent's files
    given back to the sandbox's agent user."""
    data = await asyncio.to_thread(plain_tar, trial_dir)
    await sandbox.apply_tree(data, remove=[*manifest.deletions, *manifest.opaque_dirs])
    if manifest.agent_owned:
        paths = "\0".join(manifest.agent_owned).encode()
        result = await sandbox.exec(CHOWN_AGENT, cwd="/", user="root", stdin=paths, env=HELPER_ENV)
        if not result.ok:
            raise SandboxError(f"giving the agent's files back to it failed: {result.stderr.strip()[-300:]}")


def rescore_stamp() -> str:
    """A name for this rescore's directories: the local time to the second."""
    return datetime.now().strftime("%Y-%m-%d__%H-%M-%S")


def _trial_task(config: TrialConfig, tests: Path | None) -> Task | str:
    """The trial's task (with `tests` as its tests/ when given), or why it cannot be rescored."""
    try:
        task = load_task(config.task_path)
    except (TaskLoadError, OSError) as exc:
        return f"its task does not load: {exc}"
    if task.steps:
        return "multi-step tasks are not rescored"
    return task.model_copy(update={"tests_dir": tests}) if tests is not None else task


async def rescore_trial(job: JobConfig, trial_dir: Path, tests: Path | None, stamp: str) -> RescoreRow:
    """Rescore one trial of `job` (its kept state, its task's verifier or `tests`) into
    `trial_dir/rescore/<stamp>/`."""
    row = RescoreRow(trial_name=trial_dir.name)
    old = JobStore(trial_dir.parent).read_trial_result(trial_dir.name)
    row.old_reward = old.reward if old is not None else None
    manifest = load_kept_state(trial_dir)
    if manifest is None:
        row.skipped = "no kept state (run with --keep-state)"
        return row
    config = TrialConfig.model_validate_json((trial_dir / "config.json").read_bytes())
    task = await asyncio.to_thread(_trial_task, config, tests)
    if isinstance(task, str):
        row.skipped = task
        return row
    spec = TrialSpec(
        config=config.model_copy(update={"keep_state_mb": None}),
        task=TaskRef.directory(task.path),
        job_name=job.job_name,
        sandbox=job.sandbox,
        skip_build=job.skip_build,
        pull=job.pull,
    )
    row.result_dir = trial_dir / RESCORE_DIR / stamp
    agent = KeptStateAgent(trial_dir, manifest)
    result: TrialResult = await Trial(spec, RescoreStore(row.result_dir), task=task, agent=agent).run()
    row.new_reward = result.reward
    row.new_failure = str(result.failure.cause.value) if result.failure else None
    return row


def _trials_and_stamp(job_dir: Path) -> tuple[list[Path], str]:
    """The job's trial directories, in name order, and a stamp none of them has used yet."""
    trials = sorted(p for p in job_dir.iterdir() if (p / "config.json").is_file())
    stamp, base, n = rescore_stamp(), rescore_stamp(), 2
    while any((t / RESCORE_DIR / stamp).exists() for t in trials):  # two rescores in one second
        stamp, n = f"{base}-{n}", n + 1
    return trials, stamp


async def rescore_job(
    job_dir: Path, tests: Path | None = None, *, concurrency: int | None = None
) -> list[RescoreRow]:
    """Rescore every trial of the job in `job_dir` (JobStoreError when it is no job); one row per trial, in
    name order."""
    job = read_job_config(job_dir)
    trials, stamp = await asyncio.to_thread(_trials_and_stamp, job_dir)
    gate = asyncio.Semaphore(concurrency or job.n_concurrent)

    async def one(trial_dir: Path) -> RescoreRow:
        async with gate:
            return await rescore_trial(job, trial_dir, tests, stamp)

    return list(await asyncio.gather(*(one(t) for t in trials)))
