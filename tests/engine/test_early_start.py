"""The loop agent's first model call runs while the trial's sandbox starts (Agent.starts_before_sandbox).

A real OpenAI-compatible server on 127.0.0.1 (aiohttp) answers the loop agent; real local sandboxes. The
first test makes the sandbox die while it is still starting (its healthcheck blocks until the model request
has arrived, then the server kills the sandbox's processes): the trial must fail with the sandbox's cause,
the in-flight model call must be cancelled (the server sees the client go away) and nothing of the sandbox
may be left running.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import psutil
import pytest
from aiohttp import web
from engine_tasks import make_task

from evsys.engine import AgentSpec, Job, JobConfig
from evsys.records import FailureCause

HEALTHCHECK_TOML = (
    '[task]\nname = "{name}"\n[agent]\ntimeout_sec = 120\n[verifier]\ntimeout_sec = 60\n'
    '[environment]\nworkdir = "/app"\nnetwork_mode = "no-network"\n'
    # blocks the sandbox's start (the healthcheck counts as sandbox_start) for up to 60 s
    '[environment.healthcheck]\ncommand = "sleep 60"\ntimeout_sec = 90\nretries = 1\n'
)


class ScriptedServer:
    """Chat completions: first a `bash` tool call, then (once the chat holds a tool result) a final answer.
    With `hold_first`, the first request is held open until the client goes away (recorded in `cancelled`)
    and `on_first` is awaited when it arrives."""

    def __init__(self, *, hold_first: bool = False) -> None:
        self.hold_first = hold_first
        self.arrived = 0
        self.cancelled = 0
        self.on_first: Callable[[], Awaitable[None]] | None = None

    async def chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.arrived += 1
        if self.hold_first and self.arrived == 1:
            try:
                if self.on_first is not None:
                    await self.on_first()
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        done = any(m.get("role") == "tool" for m in body["messages"])
        message: dict = {"role": "assistant", "content": "done" if done else ""}
        if not done:
            arguments = json.dumps({"command": "echo ok > /app/out.txt"})
            message["tool_calls"] = [
                {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": arguments}}
            ]
        choice = {"index": 0, "message": message, "finish_reason": "stop" if done else "tool_calls"}
        usage = {"prompt_tokens": 5, "completion_tokens": 2}
        return web.json_response({"id": "x", "model": "m", "choices": [choice], "usage": usage})


@contextlib.asynccontextmanager
async def serving(server: ScriptedServer) -> AsyncIterator[str]:
    """Serve `server` on 127.0.0.1; its base URL."""
    app = web.Application()
    app.router.add_post("/v1/chat/completions", server.chat)
    runner = web.AppRunner(app, handler_cancellation=True)  # a client that goes away cancels the handler
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        await runner.cleanup()


# bubblewrap processes of this process already running when a test began (another fixture's sandboxes, or
# ones an earlier test left): a test judges, and kills, only the sandboxes it started itself
PREEXISTING: set[int] = set()


def sandbox_processes() -> list[psutil.Process]:
    """This process's descendants that are sandboxes (bubblewrap and what runs inside it) started since the
    test began."""
    found = []
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            bwraps = {p.pid for p in (child, *child.parents()) if p.name() == "bwrap"}
            if bwraps and not bwraps & PREEXISTING:
                found.append(child)
    return found


async def kill_sandbox_in_healthcheck() -> int:
    """Once a sandbox of this process runs its healthcheck (`sleep 60`), SIGKILL every process of it; how
    many there were (0: none came within 60 s)."""
    for _ in range(600):
        procs = sandbox_processes()
        if any(p.name() == "sleep" for p in procs):
            for proc in procs:
                with contextlib.suppress(psutil.Error):
                    proc.send_signal(signal.SIGKILL)
            return len(procs)
        await asyncio.sleep(0.1)
    return 0


def _job(dataset: Path, jobs: Path, url: str, name: str) -> Job:
    agent = AgentSpec(name="loop", model="vllm:m", base_url=url)
    return Job(JobConfig(datasets=[dataset], agents=[agent], jobs_dir=jobs, job_name=name))


@pytest.mark.needs_sandbox
async def test_a_sandbox_that_fails_while_the_first_model_call_is_in_flight(tmp_path: Path) -> None:
    dataset = tmp_path / "ds"
    make_task(dataset, "slow-start", toml=HEALTHCHECK_TOML.format(name="slow-start"))
    server = ScriptedServer(hold_first=True)
    killed: list[int] = []

    async def kill() -> None:
        killed.append(await kill_sandbox_in_healthcheck())

    server.on_first = kill
    async with serving(server) as url:
        result = await _job(dataset, tmp_path / "jobs", url, "fails").run()
        await asyncio.sleep(0)  # let the server's handler see the cancellation
    # the model call was in flight while the sandbox was still starting, and the sandbox was then killed
    assert server.arrived == 1 and killed and killed[0] > 0
    [trial] = result.trials
    assert trial.failure is not None
    assert trial.cause == FailureCause.SANDBOX_FAILED, trial.failure.message
    assert "healthcheck could not run" in trial.failure.message
    assert server.cancelled == 1  # the in-flight call was abandoned, not awaited to its answer
    assert trial.timing.agent_run is None  # the agent never ran in the dead sandbox
    assert sandbox_processes() == []


@pytest.mark.needs_sandbox
async def test_the_first_model_call_overlaps_the_sandbox_start(tmp_path: Path) -> None:
    dataset = tmp_path / "ds"
    make_task(dataset, "quick")
    server = ScriptedServer()
    async with serving(server) as url:
        result = await _job(dataset, tmp_path / "jobs", url, "ok").run()
    [trial] = result.trials
    assert trial.failure is None and trial.reward == 1.0
    assert server.arrived == 2
    # where time went: the early call is its own phase beside sandbox_start and agent_run
    assert trial.timing.agent_early is not None and trial.timing.agent_early > 0
    assert trial.timing.sandbox_start is not None and trial.timing.agent_run is not None
    assert "agent_early" in result.metrics[0].timing  # and in the job's per-phase figures
    steps = json.loads((tmp_path / "jobs" / "ok" / trial.trial_name / "trajectory.json").read_text())["steps"]
    assert [s["source"] for s in steps] == ["system", "user", "agent", "agent"]


@pytest.fixture(autouse=True)
def _note_preexisting_sandboxes() -> Iterator[None]:
    PREEXISTING.clear()
    PREEXISTING.update(p.pid for p in sandbox_processes() if p.name() == "bwrap")
    if PREEXISTING:
        warnings.warn(f"sandboxes left running before this test: {sorted(PREEXISTING)}", stacklevel=2)
    yield
    PREEXISTING.clear()
