"""Bounded verification: an LLM judge whose server accepts the connection and never replies does not stall
`run_rollouts`. The other items score; the judged one fails with `verifier_timeout` and a message naming the
limit. The server is a real HTTP listener on 127.0.0.1 that reads the request and then says nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from evsys.model.spec import create_model_client
from evsys.records import FailureCause
from evsys.rollouts import run_rollouts
from evsys.task.python import VerifiedTask
from evsys.verify.judge import LLMJudge
from evsys.verify.rubric import RubricVerifier

pytestmark = pytest.mark.timeout(120)  # a stalled step fails here instead of hanging the suite


class SilentServer:
    """Accepts connections, reads what they send, never answers; counts the requests it swallowed."""

    def __init__(self) -> None:
        self.requests = 0
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Read the request line, then wait for the client to give up."""
        if await reader.readline():
            self.requests += 1
        await reader.read()  # until the client closes
        writer.close()


@pytest.fixture
async def silent_judge() -> AsyncIterator[SilentServer]:
    """A started SilentServer on a free port of 127.0.0.1."""
    silent = SilentServer()
    server = await asyncio.start_server(silent.handle, "127.0.0.1", 0)
    silent.port = server.sockets[0].getsockname()[1]
    yield silent
    server.close()


def _judged_items(fresh_verifier, silent: SilentServer, **judge_kwargs) -> list[VerifiedTask]:
    client = create_model_client(
        "openai:judge", base_url=f"http://127.0.0.1:{silent.port}/v1", api_key="unused"
    )
    judge = RubricVerifier(LLMJudge("Grade {action}. Score: N", client, **judge_kwargs))
    plain = fresh_verifier(lambda completion: 1.0)
    judged = fresh_verifier(judge)
    return [
        VerifiedTask(id="plain", prompt="What is 7*6?", verifier=plain),
        VerifiedTask(id="judged", prompt="What is 19+23?", verifier=judged),
    ]


def _assert_judged_timed_out(groups, silent: SilentServer, evidence: str) -> None:
    plain, judged = groups
    assert plain.n_errors == 0 and [t.reward for t in plain.trajectories] == [1.0, 1.0]
    assert silent.requests >= 1  # the judge really asked the silent server
    for sample in judged.trajectories:
        assert sample.error is not None and sample.error.cause == FailureCause.VERIFIER_TIMEOUT
        assert evidence in sample.error.message


async def test_a_judge_that_never_replies_times_out_on_its_own_limit(
    tmp_path: Path, math_client, fresh_verifier, silent_judge
):
    items = _judged_items(fresh_verifier, silent_judge, timeout_s=1.0)
    groups = await run_rollouts(items, model=math_client, num_samples=2, jobs_dir=tmp_path)
    _assert_judged_timed_out(groups, silent_judge, "LLM judge (model 'judge') did not reply within 1 s")


async def test_run_rollouts_verifier_timeout_bounds_a_judge_left_at_its_default(
    tmp_path: Path, math_client, fresh_verifier, silent_judge
):
    items = _judged_items(fresh_verifier, silent_judge)  # the judge's own limit (60 s) is not reached
    groups = await run_rollouts(
        items, model=math_client, num_samples=2, jobs_dir=tmp_path, verifier_timeout_sec=1.0
    )
    _assert_judged_timed_out(groups, silent_judge, "ran past its timeout of 1 s")


def test_a_python_task_verifier_timeout_comes_from_the_task_or_its_dataset(tmp_path: Path):
    from evsys.engine.spec import python_task_as_task
    from evsys.task.python import PYTHON_VERIFIER_TIMEOUT_SEC, load_python_tasks

    (tmp_path / "tasks.jsonl").write_text(
        '{"prompt": "a", "verifier": "v"}\n{"prompt": "b", "verifier": "v", "verifier_timeout_sec": 5}\n'
    )
    (tmp_path / "dataset.toml").write_text('[dataset]\ndata = "tasks.jsonl"\nverifier_timeout_sec = 30\n')
    tasks = load_python_tasks(tmp_path)
    limits = [python_task_as_task(t, tmp_path).config.verifier.timeout_sec for t in tasks]
    assert limits == [30.0, 5.0]
    bare = VerifiedTask(id="x", prompt="p", verifier="v")
    assert python_task_as_task(bare, tmp_path).config.verifier.timeout_sec == PYTHON_VERIFIER_TIMEOUT_SEC
