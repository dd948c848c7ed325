"""`evsys run --temperature/--max-tokens/--max-turns` and a repeated `-m`: the flags reach every model-using
agent's calls, several models make one job whose trials and records carry their model, and agents that use no
model refuse the flags before anything starts."""

from __future__ import annotations

import json

from engine_models import RecordingClient
from typer.testing import CliRunner

from evsys.cli.generation import apply_generation, generation_kwargs, once_without_model
from evsys.cli.main import app
from evsys.cli.run_config import build_job
from evsys.engine import Job


async def test_generation_flags_and_several_models_in_one_job(task_factory, memory_sandbox, tmp_path):
    task_factory("a")
    settings = {"jobs_dir": tmp_path / "jobs", "job_name": "j", "sandbox": memory_sandbox}
    config = build_job([task_factory.dataset], ["loop"], ["openai:alpha", "openai:beta"], None, [], settings)
    config = apply_generation(config, generation_kwargs(0.0, 7, 2))
    seen: dict[str, list] = {}
    factory = lambda spec: RecordingClient(spec.model, seen)  # noqa: E731
    result = await Job(config, model_client_factory=factory).run()
    assert sorted((t.trial_name, t.model) for t in result.trials) == [
        ("a__loop-openai-alpha__1", "openai:alpha"),
        ("a__loop-openai-beta__1", "openai:beta"),
    ]
    assert sorted(seen) == ["openai:alpha", "openai:beta"]
    for calls in seen.values():
        assert [(p.temperature, p.max_tokens) for p in calls] == [(0.0, 7)]
    saved = json.loads((config.job_dir / "config.json").read_text())
    assert [a["kwargs"] for a in saved["agents"]] == [
        {"temperature": 0.0, "max_tokens": 7, "max_turns": 2}
    ] * 2
    shown = CliRunner().invoke(app, ["jobs", "show", str(config.job_dir)], env={"COLUMNS": "200"})
    rows = [line for line in shown.output.splitlines() if line.startswith("│ loop")]
    assert len(rows) == 2 and "openai:alpha" in rows[0] and "openai:beta" in rows[1]  # one row per model


def test_the_flags_go_to_model_agents_only_and_a_job_of_none_is_refused(task_factory, tmp_path):
    task_factory("a")
    settings = {"jobs_dir": tmp_path / "jobs"}
    mixed = build_job([task_factory.dataset], ["oracle", "loop"], ["local"], None, [], settings)
    mixed = apply_generation(mixed, generation_kwargs(0.5, None, None))
    assert {a.name: a.kwargs for a in mixed.agents} == {"oracle": {}, "loop": {"temperature": 0.5}}
    jobs = tmp_path / "jobs"
    for flag in (["--temperature", "0"], ["--max-tokens", "64"], ["--max-turns", "3"]):
        out = CliRunner().invoke(
            app,
            ["run", str(task_factory.dataset), "-a", "oracle", "-a", "nop", *flag, "--jobs-dir", str(jobs)],
        )
        assert out.exit_code == 2
        assert f"{flag[0]}: nop, oracle use(s) no model" in out.output and "Traceback" not in out.output
    assert not jobs.exists()  # refused before anything was written


def test_a_job_file_agent_runs_once_per_model_given(tmp_path):
    (tmp_path / "job.yaml").write_text(
        f"datasets: [{tmp_path}]\nagents:\n  - name: loop\n    kwargs: {{seed: 1}}\n"
    )
    from evsys.cli.job_file import AgentFlags, config_from_file

    agents = AgentFlags(None, ["local", "openai:gpt"], None, generation={"max_turns": 4})
    config = config_from_file(tmp_path / "job.yaml", {"model": "-m/--model"}, {}, [], agents, {})
    config = apply_generation(config, agents.generation)
    assert [(a.name, a.model, a.kwargs) for a in config.agents] == [
        ("loop", "local", {"seed": 1, "max_turns": 4}),
        ("loop", "openai:gpt", {"seed": 1, "max_turns": 4}),
    ]


def test_agents_without_a_model_run_once_however_many_models_are_given(task_factory, tmp_path):
    task_factory("a")
    both = build_job([task_factory.dataset], ["oracle", "loop"], ["local", "openai:gpt"], None, [], {})
    assert [a.name for a in both.agents] == ["oracle", "oracle", "loop", "loop"]  # the plain cross product
    config = once_without_model(both)
    assert [(a.name, a.model) for a in config.agents] == [
        ("oracle", "local"),
        ("loop", "local"),
        ("loop", "openai:gpt"),
    ]
