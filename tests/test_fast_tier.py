"""The fast tier's guard (tests/tiers.py) and the doubles it runs engine tests on (evsys.testing)."""

from __future__ import annotations

import asyncio
import sys

import pytest

from evsys.model.errors import ModelError
from evsys.records.sandbox import SandboxSpec
from evsys.sandbox import LocalSandbox
from evsys.testing.memory_sandbox import ProgramCall, memory_backend
from evsys.testing.scripted_model import ScriptedModelClient, tool_call
from tiers import HeavyInFastTier, _Guard, heavy_program


@pytest.fixture
def guard():
    """A guard on this process for one test (on top of --fast's own, if any)."""
    installed = _Guard()
    yield installed
    installed.remove()


def test_commands_of_the_heavy_tier_are_told_apart_from_ordinary_ones():
    assert heavy_program(["/usr/bin/bwrap", "--ro-bind", "/usr", "/usr"]) == "needs_sandbox"
    assert heavy_program([sys.executable, "-m", "evsys.cli.main", "run", "tasks"]) == "needs_process"
    assert heavy_program([sys.executable, "-c", "from evsys.cli.model import model_app"]) == "needs_process"
    assert heavy_program(["/repo/.venv-harbor/bin/python", "-m", "harbor"]) == "needs_venv"
    assert heavy_program("dockerd --host=unix:///tmp/d.sock") == "needs_docker"
    assert heavy_program(["git", "init", "-q"]) is None
    assert heavy_program([sys.executable, "-c", "print(1)"]) is None


async def test_the_guard_refuses_a_local_sandbox_and_a_bwrap_process_and_records_both(guard):
    with pytest.raises(HeavyInFastTier, match="started a local sandbox; mark it needs_sandbox"):
        await LocalSandbox(SandboxSpec(name="fast-tier-guard")).start()
    with pytest.raises(HeavyInFastTier, match="mark it needs_sandbox"):
        await asyncio.create_subprocess_exec("bwrap", "--version")  # asyncio's processes are Popen's too
    assert len(guard.violations) == 2
    guard.violations.clear()  # the autouse check of --fast would fail this test for them otherwise
    assert await (await asyncio.create_subprocess_exec("true")).wait() == 0  # ordinary processes still run


async def test_the_memory_sandbox_runs_scripted_programs_resets_and_kills_them():
    async def hang(call: ProgramCall) -> None:
        await asyncio.sleep(60)

    def solve(call: ProgramCall) -> str:
        call.sandbox.write("/app/out.txt", call.stdin or b"ok")
        return "solved"

    backend = memory_backend({"/solution/solve.sh": solve, "sleep 60": hang})
    box = backend(SandboxSpec(name="memory-test"))
    await box.start()
    result = await box.exec_program(["/bin/bash", "/solution/solve.sh"])
    assert result.stdout == "solved" and box.read("/app/out.txt") == b"ok"
    assert (await box.exec("sleep 60", timeout=0.05)).timed_out
    assert (await box.exec("unscripted")).exit_code == 0 and box.commands[-1] == "unscripted"
    await box.reset()
    assert box.read("/app/out.txt") is None and box.resets == 1
    assert "/logs/verifier" in box.dirs  # evsys's directories are there from the start
    await box.stop()
    assert backend.made == [box] and memory_backend().made == []


async def test_the_scripted_model_answers_in_order_records_requests_and_runs_out():
    client = ScriptedModelClient(
        "hello", tool_call("bash", command="ls"), lambda request: request.tools[0]["x"]
    )
    assert (await client.complete([{"role": "user", "content": "hi"}])).text == "hello"
    called = await client.complete([{"role": "user", "content": "go"}])
    assert called.tool_calls[0].function_name == "bash" and called.tool_calls[0].arguments == {
        "command": "ls"
    }
    assert (await client.complete([], tools=[{"x": "from the tools"}])).text == "from the tools"
    assert [r.messages for r in client.requests][:2] == [
        [{"role": "user", "content": "hi"}],
        [{"role": "user", "content": "go"}],
    ]
    with pytest.raises(ModelError, match="no reply left for request 4"):
        await client.complete([])
    await client.aclose()
    assert client.closed
