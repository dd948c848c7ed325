"""The parity task set and a job runner per sandbox backend, for the parity tests."""

from __future__ import annotations

from pathlib import Path

from evsys.engine import AgentSpec, Job, JobConfig
from evsys.records import TrialResult

PARITY_TASKS = Path(__file__).parent / "tasks"


async def run_parity_job(
    tmp_path: Path,
    backend: str,
    tasks: list[str],
    *,
    agent: str = "oracle",
    datasets: list[Path] | None = None,
    **job: object,
) -> dict[str, TrialResult]:
    """Run `agent` on the named parity tasks (of `datasets`, default the parity set) on `backend`; the trial
    results by task name."""
    config = JobConfig(
        datasets=datasets or [PARITY_TASKS],
        agents=[AgentSpec(name=agent)],
        jobs_dir=tmp_path / "jobs",
        job_name=f"parity-{backend}",
        n_concurrent=4,
        sandbox=backend,
        task_names=tasks,
        **job,
    )
    result = await Job(config).run()
    return {t.task_name: t for t in result.trials}
