"""What calls cost: priced from the maintained table for hosted providers, unknown (never $0) for servers and
models the table does not know, and unknown all the way up to the job's summary."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI, Request
from typer.testing import CliRunner

from evsys.cli.main import app as cli
from evsys.model import create_model_client
from evsys.model.pricing import price_usd
from evsys.records import Usage

USAGE = {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100}


def _server_app() -> FastAPI:
    """An OpenAI-compatible server answering every call with a final answer and fixed usage."""
    server = FastAPI()

    @server.post("/v1/chat/completions")
    async def chat(request: Request) -> dict:
        body = await request.json()
        message = {"role": "assistant", "content": "done"}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        return {
            "id": "c",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [choice],
            "usage": USAGE,
        }

    return server


@pytest.fixture
def server(serve_app) -> Iterator[str]:
    with serve_app(_server_app()) as url:
        yield f"{url}/v1"


async def test_a_hosted_model_is_priced_and_a_self_hosted_server_is_unknown(server):
    hosted = create_model_client("openai:gpt-4o", base_url=server, api_key="k")
    done = await hosted.complete([{"role": "user", "content": "hi"}])
    expected = price_usd("gpt-4o", Usage(prompt_tokens=1000, completion_tokens=100), provider="openai")
    assert expected is not None and expected > 0
    assert done.cost_usd == pytest.approx(expected)
    own = create_model_client("vllm:gpt-4o", base_url=server)
    assert (await own.complete([{"role": "user", "content": "hi"}])).cost_usd is None
    assert price_usd("no-such-model-anywhere", Usage(prompt_tokens=5), provider="openai") is None


def test_unknown_cost_stays_unknown_when_summed():
    assert (Usage(cost_usd=0.5) + Usage(cost_usd=0.25)).cost_usd == pytest.approx(0.75)
    assert (Usage(cost_usd=0.5) + Usage(cost_usd=None)).cost_usd is None


def test_a_job_on_a_server_of_unknown_price_says_unknown_not_zero(server, tmp_path: Path):
    task = tmp_path / "tasks" / "t"
    (task / "tests").mkdir(parents=True)
    (task / "instruction.md").write_text("Say done.\n")
    (task / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    os.chmod(task / "tests" / "test.sh", 0o755)
    args = ["run", str(task), "-a", "loop", "-m", "vllm:my-model", "--base-url", server]
    result = CliRunner().invoke(cli, [*args, "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "j"])
    assert result.exit_code == 0, result.output
    assert "unknown" in result.output
    [trial] = [p for p in (tmp_path / "jobs" / "j").iterdir() if p.is_dir()]
    record = json.loads((trial / "result.json").read_text())
    assert record["usage"]["prompt_tokens"] == 1000 and record["usage"]["cost_usd"] is None
    trajectory = json.loads((trial / "trajectory.json").read_text())
    assert trajectory["final_metrics"]["total_cost_usd"] is None
