"""The slot API (evsys.sandbox.slots) on the local backend: 16 slots running execute_batch concurrently, own
sandboxes and shared ones (per-slot uid, workspace and process group), exec_tool vs tool_handler."""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest

from evsys.records import Bind, SandboxSpec
from evsys.sandbox.slots import SlotPool

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing")

# every call leaves its marker, then waits for all 16: serialised calls could never see them all
BARRIER = (
    "touch /barrier/{id}; for i in $(seq 1 400); do "
    "[ $(ls /barrier | wc -l) -ge 16 ] && echo together && exit 0; sleep 0.05; done; echo alone"
)


def _spec(tmp_path) -> SandboxSpec:
    barrier = tmp_path / "barrier"
    barrier.mkdir(mode=0o777)
    barrier.chmod(0o777)
    return SandboxSpec(name="slots", binds=[Bind(src=barrier, dst="/barrier", read_only=False)])


@pytest.mark.needs_sandbox
@pytest.mark.parametrize("per_sandbox", [1, 4])
async def test_sixteen_slots_run_a_batch_concurrently_and_keep_their_files_apart(tmp_path, per_sandbox):
    pool = SlotPool(_spec(tmp_path), slots_per_sandbox=per_sandbox)
    try:
        slots = await asyncio.gather(*(pool.acquire(f"traj-{i}") for i in range(16)))
        assert len({s.sandbox for s in slots}) == 16 // per_sandbox
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.create_task(tick())
        writes = [(s, "write_file", {"path": "mine.txt", "content": s.trajectory_id}) for s in slots]
        barrier = [(s, "bash", {"command": BARRIER.format(id=i)}) for i, s in enumerate(slots)]
        results = await pool.execute_batch(writes + barrier)
        ticker.cancel()
        assert all(r.success for r in results), [r.error for r in results if not r.success]
        assert [r.output.strip() for r in results[16:]] == ["together"] * 16
        assert ticks > 0  # the event loop kept running while the batch ran
        reads = await pool.execute_batch([(s, "read_file", {"path": "mine.txt"}) for s in slots])
        assert [r.output for r in reads] == [f"traj-{i}" for i in range(16)]
    finally:
        for slot in slots:
            await pool.release(slot)
        await pool.close()


@pytest.mark.needs_sandbox
async def test_shared_slots_are_isolated_by_uid_workspace_and_process_group(tmp_path):
    pool = SlotPool(_spec(tmp_path), slots_per_sandbox=2)
    a, b = await pool.acquire("a"), await pool.acquire("b")
    try:
        assert a.sandbox is b.sandbox and a.uid != b.uid
        wrote = await pool.exec_tool(b, "bash", {"command": "echo secret > s.txt; cat s.txt; id -u; pwd"})
        assert wrote.output.split() == ["secret", str(b.uid), b.workspace]  # positive control
        peek = await pool.exec_tool(a, "bash", {"command": f"cat {b.workspace}/s.txt"})
        assert not peek.success and "Permission denied" in peek.error
        started = await pool.exec_tool(b, "bash", {"command": "sleep 300 > /dev/null 2>&1 & echo $!"})
        pid = started.output.strip()
        kill = await pool.exec_tool(a, "bash", {"command": f"kill {pid}"})
        assert not kill.success and "not permitted" in kill.error
        alive = await pool.exec_tool(a, "bash", {"command": f"ps -o pid= -p {pid} || true"})
        assert alive.output.strip() == pid
        await pool.release(b)
        gone = await pool.exec_tool(a, "bash", {"command": f"ps -o pid= -p {pid} || true"})
        assert gone.output.strip() == ""
        b2 = await pool.acquire("b2")
        assert b2.uid == b2.sandbox.extra_uid(1)
        empty = await pool.exec_tool(b2, "bash", {"command": "ls -A"})
        assert empty.success and empty.output == ""
    finally:
        await pool.release(a)
        await pool.close()


@pytest.mark.needs_sandbox
async def test_exec_tool_is_structured_and_tool_handler_returns_json(tmp_path):
    pool = SlotPool(_spec(tmp_path))
    slot = await pool.acquire("t")
    try:
        result = await pool.exec_tool(slot, "bash", {"command": "echo out; echo err >&2; exit 3"})
        assert (result.success, result.output, result.error, result.exit_code) == (False, "out\n", "err\n", 3)
        handler = pool.tool_handler(slot)
        text = await handler("bash", {"command": "echo hi"})
        assert json.loads(text) == {"output": "hi\n", "error": "", "exit_code": 0}
        unknown = json.loads(await handler("browse", {}))
        assert "unknown tool 'browse'" in unknown["error"]
        bad = await pool.exec_tool(slot, "read_file", {})
        assert not bad.success and "bad arguments for read_file" in bad.error
    finally:
        await pool.release(slot)
        await pool.close()


class _ScriptedModel:
    """Runs one bash command (the instruction), then submits."""

    async def complete(self, messages, **kwargs):
        from evsys.model.base import Completion
        from evsys.records import ToolCall

        if len(messages) <= 2:
            command = messages[-1]["content"]
            call = ToolCall(
                tool_call_id="1", function_name="bash", arguments={"command": command}, raw_arguments="{}"
            )
        else:
            call = ToolCall(tool_call_id="2", function_name="submit", arguments={}, raw_arguments="{}")
        return Completion(text="", tool_calls=[call], finish_reason="tool_calls")


@pytest.mark.needs_sandbox
async def test_the_loop_agent_runs_in_shared_slots_as_their_users(tmp_path):
    from evsys.agent.base import AgentContext
    from evsys.agent.loop import LoopAgent
    from evsys.records import AgentInfo, TrajectoryRecorder
    from evsys.task.models import ResolvedEnvironment, Task

    pool = SlotPool(_spec(tmp_path), slots_per_sandbox=2)
    slots = [await pool.acquire("a"), await pool.acquire("b")]
    try:

        async def run(slot):
            task = Task(
                name="t",
                path=tmp_path,
                instruction="",
                environment=ResolvedEnvironment(workdir=slot.workspace),
            )
            recorder = TrajectoryRecorder(slot.trajectory_id, AgentInfo(name="loop"))
            ctx = AgentContext(
                task=task,
                trial_name=slot.trajectory_id,
                logs_dir=tmp_path,
                trajectory=recorder,
                model_client=_ScriptedModel(),
            )
            command = f"echo {slot.trajectory_id} > out.txt && stat -c %u out.txt && pwd"
            await LoopAgent(max_turns=3).run(command, pool.as_sandbox(slot), ctx)
            return recorder

        await asyncio.gather(*(run(s) for s in slots))
        for slot in slots:
            seen = await pool.exec_tool(slot, "read_file", {"path": "out.txt"})
            assert seen.output == f"{slot.trajectory_id}\n"
            owner = await pool.exec_tool(slot, "bash", {"command": "stat -c %u out.txt"})
            assert owner.output.strip() == str(slot.uid)
        assert slots[0].sandbox is slots[1].sandbox
    finally:
        for slot in slots:
            await pool.release(slot)
        await pool.close()
