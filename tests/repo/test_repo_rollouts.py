"""run_rollouts over repository tasks: `load_repo_tasks` rows in, one scored group per instance out, in order,
with the loop agent driving the sandbox (here a scripted model that fixes `sub` in one of two samples)."""

from __future__ import annotations

import itertools

import pytest

from evsys import load_repo_tasks, run_rollouts
from evsys.engine.config import slugify
from evsys.model.base import Completion
from evsys.records import ToolCall
from evsys.sandbox.pool import SandboxPool

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

FIX = "sed -i '0,/return a + b/! {0,/return a + b/ s/return a + b/return a - b/}' calc/__init__.py"


class ScriptedModel:
    """The first sample of each task runs the fix for `sub`, the second only looks; then both submit."""

    model = "scripted"

    def __init__(self) -> None:
        self.samples: dict[str, itertools.count] = {}

    async def complete(self, messages, **kwargs) -> Completion:
        if len(messages) <= 2:  # the first turn of a sample
            task = messages[-1]["content"].split(":", 1)[0]
            fix = next(self.samples.setdefault(task, itertools.count())) == 0
            command = FIX if fix else "git status --short"
            call = ToolCall(
                tool_call_id="c1",
                function_name="bash",
                arguments={"command": command},
                raw_arguments=f'{{"command": "{command}"}}',
            )
            return Completion(text="", tool_calls=[call], finish_reason="tool_calls")
        call = ToolCall(tool_call_id="c2", function_name="submit", arguments={}, raw_arguments="{}")
        return Completion(text="", tool_calls=[call], finish_reason="tool_calls")


async def test_run_rollouts_groups_repository_samples_per_instance(
    image_tools, calc_rows_file, tmp_path, monkeypatch
):
    leases: dict[str, object] = {}  # sandbox name -> the lease the job's pool handed out
    acquire = SandboxPool.acquire

    async def recording_acquire(pool, spec, *args, **kwargs):
        leases[spec.name] = lease = await acquire(pool, spec, *args, **kwargs)
        return lease

    monkeypatch.setattr(SandboxPool, "acquire", recording_acquire)
    rows = [r for r in load_repo_tasks(calc_rows_file) if r.instance_id in ("calc-neg", "calc-sub")]
    rows.sort(key=lambda r: r.instance_id != "calc-sub")  # input order: calc-sub first
    groups = await run_rollouts(
        rows,
        model=ScriptedModel(),
        num_samples=2,
        max_turns=3,
        n_concurrent=1,
        jobs_dir=tmp_path,
        job_name="r",
    )
    assert [g.task_id for g in groups] == ["calc-sub", "calc-neg"]
    sub = sorted(t.reward for t in groups[0].trajectories)
    assert sub == [0.0, 1.0]  # the sample that ran the fix passes; the other does not
    assert [t.reward for t in groups[1].trajectories] == [0.0, 0.0]
    assert (tmp_path / "r" / "tasks" / "rows.jsonl").is_file()
    # every sample's loop agent ran in a sandbox leased from the job's pool, one lease per sample (its
    # grading sandbox, "-verifier", another)
    trial_names = {slugify(t.trial_name, max_len=60) for g in groups for t in g.trajectories}
    agents = [name for name in leases if not name.endswith("-verifier")]
    assert len(trial_names) == 4 and len(agents) == 4
    assert all(sum(f"-{trial}-" in name for name in agents) == 1 for trial in trial_names)
