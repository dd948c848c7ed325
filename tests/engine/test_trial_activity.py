"""What running trials are doing, live: each trial's phases and the loop agent's turns reach `evsys run`'s
progress display (through `Job.status()`) and `--stream`, from the job's events."""

from __future__ import annotations

from engine_models import RecordingClient

from evsys.cli.progress import describe, doing
from evsys.cli.stream import event_printer
from evsys.engine import AgentSpec, Job, JobConfig


async def test_phases_and_turns_are_events_and_status_says_what_each_trial_does(
    task_factory, memory_sandbox, tmp_path
):
    task_factory("a")
    config = JobConfig(
        datasets=[task_factory.dataset],
        agents=[AgentSpec(name="loop", model="openai:m")],
        jobs_dir=tmp_path / "jobs",
        job_name="j",
        sandbox=memory_sandbox,
    )
    job = Job(config, model_client_factory=lambda spec: RecordingClient(spec.model, {}))
    seen: list[tuple[str, str, str]] = []

    def watch(event: dict) -> None:  # what the progress display would read at this moment
        now = job.status()["activity"].get(event["trial"], "")
        seen.append((event["trial"], event["type"], now))

    job.on_agent_event = watch
    await job.run()
    trial = "a__loop-openai-m__1"
    # the first call starts early, while the sandbox starts, and is what the agent phase shows
    assert (trial, "phase", "sandbox start") in seen
    assert (trial, "turn", "sandbox start (agent turn 1)") in seen
    assert (trial, "phase", "agent turn 1") in seen
    assert (trial, "phase", "verifier") in seen
    kinds = [now for name, _, now in seen if name == trial]
    assert kinds.index("sandbox start") < kinds.index("agent turn 1") < kinds.index("verifier")
    assert job.status()["activity"] == {}  # a finished trial is no longer shown


def test_the_progress_line_names_what_the_first_running_trials_do():
    status = {
        "running": 5,
        "errored": 0,
        "cancelled": 0,
        "mean_reward_by_agent": {},
        "activity": {"e__loop__1": "image", "a__loop__1": "agent turn 3", "b__loop__1": "verifier",
                     "c__loop__1": "sandbox start", "d__loop__1": "agent"},
    }  # fmt: skip
    line = describe(status)
    assert line.endswith(
        "now: a__loop__1 agent turn 3, b__loop__1 verifier, c__loop__1 sandbox start (+2 more)"
    )
    assert doing({}) == "" and "now:" not in describe({**status, "activity": {}})


def test_stream_prints_a_line_per_phase_and_turn():
    from rich.console import Console

    out = Console(record=True, width=200)
    printer = event_printer(out)
    printer({"trial": "a__loop__1", "type": "phase", "data": {"phase": "sandbox_start"}})
    printer({"trial": "a__loop__1", "type": "turn", "data": {"turn": 2}})
    text = out.export_text()
    assert "a__loop__1 phase         sandbox start" in text
    assert "a__loop__1 turn          agent turn 2" in text


def test_a_turn_that_started_early_stays_in_view_until_the_agent_is_done():
    from evsys.engine.activity import TrialActivity

    def phase(name: str) -> dict:
        return {"type": "phase", "data": {"phase": name}}

    now = TrialActivity()
    assert now.text() == "starting"
    now.update({"type": "turn", "data": {"turn": 1}})  # the loop agent's first call, made early
    now.update(phase("sandbox_start"))
    assert now.text() == "sandbox start (agent turn 1)"
    now.update(phase("agent_run"))
    assert now.text() == "agent turn 1"  # the early call still runs
    now.update({"type": "turn", "data": {"turn": 2}})
    assert now.text() == "agent turn 2"
    assert not now.update({"type": "llm_response", "data": {}}) and now.text() == "agent turn 2"
    now.update(phase("verifier"))
    assert now.text() == "verifier"
    harness = TrialActivity()
    harness.update(phase("agent_run"))
    harness.update({"type": "llm_request", "data": {"call_index": 0}})
    assert harness.text() == "agent model call 1"
