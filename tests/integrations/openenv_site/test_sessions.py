"""OpenEnv 0.10's own session machinery drives evsys trials (evsys.integrations.openenv): its MCP harness
adapter and TRL-style rollout function over `EvsysSessionFactory` sessions, its JSON-RPC bridge, and the
loop-owning `TrainableSession` path over a real harness process with a tiny local model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openenv.core.harness import (
    HarnessRunLimits,
    MCPHarnessAdapter,
    ModelStepResult,
    SessionMCPBridge,
    TrainableSession,
    TrainingTrace,
    build_harness_rollout_func,
)
from openenv.core.llm_client import LLMResponse, ToolCall

from evsys.integrations.openenv import EvsysHarnessSession, EvsysSession, EvsysSessionFactory
from evsys.records import TrialResult
from evsys.testing.tiny_model import DEMO_RECIPE, build_tiny_model

REPO = Path(__file__).resolve().parents[3]
TASK = REPO / "examples" / "tasks" / "create-file"
GOOD = "printf 'Hello from evsys!\\n' > /app/greeting.txt; ls /app"
BAD = "printf 'Goodbye\\n' > /app/greeting.txt; ls /app"


def scripted(command: str, seen: list[list[dict[str, Any]]]) -> Any:
    """An OpenEnv `ModelStep` that calls bash with `command`, then submits."""

    def step(messages: list[dict[str, Any]], tools: list[Any], sampling: dict[str, Any]) -> ModelStepResult:
        seen.append(list(messages))
        if len(seen) == 1:
            call = ToolCall(id="c1", name="bash", args={"command": command})
        else:
            call = ToolCall(id="c2", name="submit", args={})
        return ModelStepResult(response=LLMResponse(content="", tool_calls=[call]))

    return step


@pytest.fixture
def factory(tmp_path: Path) -> Iterator[EvsysSessionFactory]:
    made = EvsysSessionFactory(TASK, jobs_dir=tmp_path / "jobs")
    yield made
    made.close()


def trial(factory: EvsysSessionFactory, name: str) -> TrialResult:
    return TrialResult.model_validate_json((factory.runner.job_dir / name / "result.json").read_text())


@pytest.mark.parametrize(("command", "reward"), [(GOOD, 1.0), (BAD, 0.0)])
def test_openenvs_mcp_adapter_runs_an_evsys_trial(
    factory: EvsysSessionFactory, command: str, reward: float
) -> None:
    session = factory.create("create-file", seed=0, episode_id="ep-1")
    assert isinstance(session, EvsysSession) and not isinstance(session, TrainableSession)
    seen: list[list[dict[str, Any]]] = []
    try:
        rollout = MCPHarnessAdapter().run_white_box(
            scripted(command, seen), session, HarnessRunLimits(max_turns=4)
        )
        verify = session.verify(rollout.messages)
    finally:
        session.close()
    assert seen[0][0]["content"].startswith("Create the file `/app/greeting.txt`")
    # the command ran in the trial's sandbox: its output came back as the tool message
    assert rollout.messages[2]["role"] == "tool" and rollout.messages[2]["content"].strip() == "greeting.txt"
    assert rollout.done and [e.tool_name for e in rollout.tool_trace] == ["bash", "submit"]
    # submit ended the episode with the verifier's reward, and verify() forwards the same reward
    assert rollout.tool_trace[-1].result.metadata["reward"] == reward
    assert verify.env_reward == reward
    recorded = trial(factory, verify.artifacts["trial_name"])
    assert recorded.reward == reward and recorded.failure is None


def test_openenvs_rollout_function_scores_with_the_verifier(factory: EvsysSessionFactory) -> None:
    commands = iter([GOOD, BAD, GOOD])
    seen: list[list[dict[str, Any]]] = []
    rollout_func = build_harness_rollout_func(
        session_factory=factory,
        harness_adapter=MCPHarnessAdapter(),
        model_step_builder=lambda trainer, session: scripted(next(commands), []),
        limits=HarnessRunLimits(max_turns=4),
    )
    out = rollout_func([{"task": "create-file"}] * 3, None)
    assert out["env_reward"] == [1.0, 0.0, 1.0]
    assert not factory.runner.service.episodes  # every session's trial finished and its sandbox was released
    assert seen == []


def test_the_json_rpc_bridge_lists_and_calls_evsys_tools(factory: EvsysSessionFactory) -> None:
    session = factory.create(None, seed=3)
    try:
        bridge = SessionMCPBridge(session)
        listed = bridge.handle_request({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        names = [t["name"] for t in listed["result"]["tools"]]
        assert names == ["bash", "read_file", "write_file", "str_replace", "submit"]
        call = {"name": "bash", "arguments": {"command": "id -un; pwd"}}
        ran = bridge.handle_request({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call})
        user, cwd = ran["result"]["data"].split()
        assert user != "root" and cwd == "/app"  # the task's agent user, in the task's workdir
        unknown = {"name": "reset", "arguments": {}}
        refused = bridge.handle_request(
            {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": unknown}
        )
        assert refused["error"]["message"].startswith("Reserved")
        missing = {"name": "rm_rf", "arguments": {}}
        refused = bridge.handle_request(
            {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": missing}
        )
        assert "Unknown tool" in refused["error"]["message"]
    finally:
        session.close()
    assert not factory.runner.service.episodes


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_loop_owning_harness_session_returns_the_proxys_tokens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the harness class lives beside the harness tests (on sys.path when their conftest ran first, not alone)
    monkeypatch.syspath_prepend(str(Path(__file__).parents[2] / "harness"))
    model = build_tiny_model(DEMO_RECIPE)
    factory = EvsysSessionFactory(
        TASK,
        jobs_dir=tmp_path / "jobs",
        harness="stream_agents:TinyHarnessAgent",
        model=f"local:{model}",
        step_timeout_sec=120,
    )
    try:
        session = factory.create("create-file", seed=0, episode_id="loop-1")
        assert isinstance(session, EvsysHarnessSession) and isinstance(session, TrainableSession)
        try:
            assert session.wait_for_completion() == 0
            trace = session.fetch_training_trace()
            verify = session.verify([])
        finally:
            session.close()
    finally:
        factory.close()
    assert isinstance(trace, TrainingTrace) and trace.turns
    raw = json.loads(
        (factory.runner.job_dir / verify.artifacts["trial_name"] / "trajectory.json").read_text()
    )
    steps = [s for s in raw["steps"] if s["source"] == "agent" and (s.get("metrics") or {}).get("logprobs")]
    assert len(trace.turns) == len(steps)
    for turn, step in zip(trace.turns, steps, strict=True):
        metrics = step["metrics"]
        assert turn.prompt_token_ids == metrics["prompt_token_ids"]
        assert turn.completion_token_ids == metrics["completion_token_ids"]
        assert turn.per_token_logps == metrics["logprobs"]
        assert turn.loss_mask == [0] * len(metrics["prompt_token_ids"]) + [1] * len(
            metrics["completion_token_ids"]
        )
    # the tiny harness only talks: greeting.txt was never written, and the verifier says so
    assert verify.env_reward == 0.0
    # the trace round-trips through OpenEnv's own entry format (what a trainer's reward functions see)
    back = TrainingTrace.from_entries(trace.to_trace_entries())
    assert [(t.node_id, t.completion_token_ids) for t in back.turns] == [
        (t.node_id, t.completion_token_ids) for t in trace.turns
    ]


def test_verify_gives_the_reward_under_the_integrity_policy(tmp_path: Path) -> None:
    """A task whose verifier scores 1.0 but saw a forgery (a finding): `verify()` zeroes it by default,
    leaves it out (None) under `screen`, and reports the findings either way."""
    from evsys.records import IntegrityFinding
    from evsys.rollouts import save_tasks
    from evsys.task.python import VerifiedTask
    from evsys.verify.base import VerifierResult
    from evsys.verify.functions import register_verifier, unregister_verifier

    forged = IntegrityFinding(kind="run_void", evidence="the runner exited early", source="repo")
    register_verifier(
        "openenv-forged", lambda completion: VerifierResult(rewards={"reward": 1.0}, integrity=[forged])
    )
    dataset = save_tasks(
        [VerifiedTask(id="forged", prompt="6*7?", verifier="openenv-forged")], tmp_path / "t"
    )
    got = {}
    try:
        for policy in ("zero", "screen"):
            factory = EvsysSessionFactory(dataset, jobs_dir=tmp_path, job_name=policy, integrity=policy)
            try:
                session = factory.create("forged")
                submitted = session.call_tool("submit", {"message": "42"})
                verify = session.verify([])
            finally:
                factory.close()
            assert submitted.done and submitted.metadata["reward"] == verify.env_reward  # one reward
            got[policy] = (verify.env_reward, verify.metrics["screened"], verify.metrics["integrity"])
    finally:
        unregister_verifier("openenv-forged")
    finding = forged.model_dump(mode="json")
    assert got == {"zero": (0.0, False, [finding]), "screen": (None, True, [finding])}
