"""A loop turn cut off mid-generation (the agent timeout) keeps the tokens sampled so far, marked
`cut_short`; the local model's turns are short by default; and the README's `evsys run examples/tasks -a loop
-m local` records at least one model turn per trial."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from evsys.agent.base import AgentContext
from evsys.agent.loop import LoopAgent
from evsys.model.base import Completion, SamplingParams
from evsys.model.partial import current_partial
from evsys.records import AgentInfo, TrajectoryRecorder
from evsys.task.loader import load_task

REPO = Path(__file__).resolve().parents[2]
CREATE_FILE = REPO / "examples" / "tasks" / "create-file"
SAMPLED = [11, 12, 13]


class SlowModel:
    """A model that samples three tokens (reporting them as the local engine does), then never finishes;
    `params` is what it was asked."""

    model = "slow"

    def __init__(self) -> None:
        self.params: SamplingParams | None = None
        self.sampled = asyncio.Event()

    async def complete(self, messages, *, tools=None, params=None) -> Completion:
        self.params = params
        partial = current_partial()
        if partial is not None:
            partial.prompt_token_ids = [1, 2]
            partial.decode = lambda ids: "".join(f"<{i}>" for i in ids)
            for token in SAMPLED:
                partial.add(token, -0.5)
        self.sampled.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        """Nothing to release."""


async def first_turn_cut_off(model_name: str | None, **kwargs) -> tuple[SlowModel, list]:
    """The loop agent's first turn, cancelled (as the agent timeout does) once the model sampled tokens."""
    model = SlowModel()
    recorder = TrajectoryRecorder("s", AgentInfo(name="loop"))
    ctx = AgentContext(
        task=load_task(CREATE_FILE),
        trial_name="t",
        logs_dir=Path("/nonexistent"),
        trajectory=recorder,
        model_name=model_name,
        model_client=model,
    )
    early = asyncio.ensure_future(LoopAgent(**kwargs).run_early("Write the file.", ctx))
    await model.sampled.wait()
    early.cancel()
    with pytest.raises(asyncio.CancelledError):
        await early
    return model, recorder.steps


async def test_a_turn_cut_off_keeps_its_tokens_marked_cut_short():
    _, steps = await first_turn_cut_off("local")
    assert [s.source for s in steps] == ["system", "user", "agent"]  # the instruction, then the cut turn
    cut = steps[-1]
    assert cut.model_extra["finish_reason"] == "cut_short"
    assert cut.message == "<11><12><13>"
    assert cut.metrics.completion_token_ids == SAMPLED and cut.metrics.prompt_token_ids == [1, 2]
    assert cut.metrics.logprobs == [-0.5] * 3 and cut.metrics.loss_mask == [1, 1, 1]
    assert cut.metrics.completion_tokens == 3


async def test_the_local_model_asks_for_short_turns_unless_told():
    local, _ = await first_turn_cut_off("local")
    remote, _ = await first_turn_cut_off("openai:gpt-4.1")
    told, _ = await first_turn_cut_off("local", max_tokens=500)
    assert (local.params.max_tokens, remote.params.max_tokens, told.params.max_tokens) == (96, 1024, 500)


@pytest.mark.timeout(600)
@pytest.mark.needs_process
@pytest.mark.needs_model
@pytest.mark.needs_sandbox
def test_the_readme_loop_command_records_a_model_turn_in_every_trial(tmp_path):
    """`evsys run examples/tasks -a loop -m local` (the README's, on two of its tasks), defaults only."""
    readme = (REPO / "README.md").read_text()
    assert "evsys run examples/tasks -a loop -m local " in readme
    tasks = ["-t", "create-file", "-t", "word-frequency"]
    args = [sys.executable, "-m", "evsys", "run", "examples/tasks", "-a", "loop", "-m", "local", *tasks]
    done = subprocess.run(
        [*args, "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "readme"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    trajectories = sorted((tmp_path / "jobs" / "readme").glob("*/trajectory.json"))
    assert len(trajectories) == 2
    for path in trajectories:
        steps = json.loads(path.read_text())["steps"]
        turns = [s for s in steps if s["source"] == "agent" and s["metrics"]["completion_token_ids"]]
        assert turns, f"{path.parent.name} recorded no model turn: {steps}"
