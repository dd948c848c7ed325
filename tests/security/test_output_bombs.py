"""Red team: output bombs. A command's output is bounded while it streams (the daemon keeps a head and a tail
per stream and counts the rest); a spawned process nobody reads is paused, not buffered; the model sees a
marker where output was cut. Memory is measured as the peak RSS (VmHWM) of a separate orchestrator process."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap

import pytest

from evsys.agent.harness.mcp_server import ToolOutput
from evsys.agent.tools import SandboxTools
from evsys.records import DEFAULT_MAX_OUTPUT_BYTES, ExecResult, SandboxSpec, ToolCall
from evsys.sandbox import LocalSandbox

pytestmark = pytest.mark.security

MIB = 1 << 20
_names = itertools.count()


def spec(**kw) -> SandboxSpec:
    """A sandbox spec with a unique name."""
    return SandboxSpec(name=f"output-bombs-{os.getpid()}-{next(_names)}", **kw)


# Runs in its own process: the peak RSS of the orchestrator, before and after the bomb.
ORCHESTRATOR = textwrap.dedent(
    """
    import asyncio, json, sys
    from evsys.sandbox import LocalSandbox
    from evsys.records import SandboxSpec

    def hwm():
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024

    async def main(kind):
        async with LocalSandbox(SandboxSpec(name=f"bomb-{kind}-{__import__('os').getpid()}")) as sb:
            await sb.exec("echo warm")
            before = hwm()
            if kind == "exec":
                r = await sb.exec("yes", timeout=5)
                report = {"total": r.stdout_total_bytes, "kept": len(r.stdout_bytes)}
                report |= {"timed_out": r.timed_out, "head": r.stdout_bytes[:4].decode()}
                report |= {"tail": r.stdout_bytes[-4:].decode()}
            else:
                proc = await sb.spawn(["yes"])
                await asyncio.sleep(5)  # nobody reads: the daemon must stop reading the pipe
                unread = len(proc.stdout._buffer)
                got = 0
                while got < 200 * 2**20:  # then read: the pipe flows again, far past the buffer bound
                    got += len(await proc.stdout.read(2**20))
                await proc.kill()
                report = {"unread": unread, "read_after": got}
            report |= {"before": before, "after": hwm()}
            print(json.dumps(report))

    asyncio.run(main(sys.argv[1]))
    """
)


def run_orchestrator(kind: str) -> dict:
    env = dict(os.environ)
    proc = subprocess.run(
        [sys.executable, "-c", ORCHESTRATOR, kind], capture_output=True, text=True, timeout=300, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_yes_for_five_seconds_stays_bounded_in_the_orchestrator():
    report = run_orchestrator("exec")
    # positive control: `yes` really wrote far more than the cap
    assert report["timed_out"] and report["total"] > 10 * DEFAULT_MAX_OUTPUT_BYTES
    assert report["kept"] == DEFAULT_MAX_OUTPUT_BYTES
    assert report["head"] == "y\ny\n" and report["tail"] == "y\ny\n"
    assert report["after"] - report["before"] < 64 * MIB, report


@pytest.mark.slow
def test_spawned_process_nobody_reads_is_paused_not_buffered():
    report = run_orchestrator("spawn")
    # positive control: the process kept writing once read (200 MiB came through after the pause)
    assert report["read_after"] >= 200 * MIB
    assert report["unread"] <= 40 * MIB, report  # twice the reader's 16 MiB limit, plus frames in flight
    assert report["after"] - report["before"] < 128 * MIB, report


@pytest.mark.needs_sandbox
async def test_head_and_tail_are_kept_on_every_command_path():
    """Forked (a user's first commands), worker (later ones), stderr: head and tail exact, middle counted."""
    async with LocalSandbox(spec(max_output_bytes=64 * 1024)) as sb:
        await check_head_and_tail(sb)


async def check_head_and_tail(sb: LocalSandbox) -> None:
    """Four commands of 1.2 MB on each stream, kept as 32 KiB head + 32 KiB tail."""
    full = "".join(f"{n}\n" for n in range(1, 200_001)).encode()
    for _ in range(4):  # the first two run forked, later ones on a persistent worker
        r = await sb.exec("seq 1 200000; seq 1 200000 >&2")
        assert r.stdout_total_bytes == len(full) == r.stderr_total_bytes  # positive control: all was written
        for kept, head in ((r.stdout_bytes, r.stdout_head_bytes), (r.stderr_bytes, r.stderr_head_bytes)):
            assert len(kept) == 64 * 1024 and head == 32 * 1024
            assert kept[:head] == full[:head] and kept[head:] == full[-32 * 1024 :]
        assert r.stdout_truncated and r.stderr_truncated
        assert "bytes of output omitted here" in r.stdout_shown


@pytest.mark.needs_sandbox
async def test_small_output_is_whole_and_unmarked():
    async with LocalSandbox(spec()) as sb:
        r = await sb.exec("echo hi; echo err >&2")
    assert (r.stdout_bytes, r.stderr_bytes) == (b"hi\n", b"err\n")
    assert r.stdout_total_bytes == 3 and not r.stdout_truncated and r.stdout_shown == "hi\n"


@pytest.mark.needs_sandbox
async def test_loop_agent_shows_the_marker_to_the_model():
    async with LocalSandbox(spec(max_output_bytes=8192)) as sb:
        await check_loop_marker(sb)


async def check_loop_marker(sb: LocalSandbox) -> None:
    """seq 1 100000 (588,895 bytes) through the loop agent's bash tool, with 8 KiB kept."""
    tools = SandboxTools(sb, workdir="/app", max_output_chars=1_000_000)
    args = {"command": "seq 1 100000"}
    call = ToolCall(tool_call_id="c1", function_name="bash", arguments=args, raw_arguments=json.dumps(args))
    outcome = await tools.call(call)
    assert outcome.content.startswith("1\n2\n3\n")
    assert "bytes of output omitted here (588,895 bytes in all)" in outcome.content
    assert outcome.content.endswith("100000\n[stdout was 588,895 bytes; its middle is omitted above]")
    clipped = await SandboxTools(sb, workdir="/app", max_output_chars=2000).call(call)
    assert clipped.content.endswith("[stdout was 588,895 bytes; its middle is omitted above]")


def test_harness_tool_output_shows_the_marker():
    result = ExecResult(stdout_bytes=b"head|tail", exit_code=0, stdout_total_bytes=1000, stdout_head_bytes=5)
    text = ToolOutput.from_exec(result).text
    assert text.startswith("head|\n[... evsys: 991 bytes of output omitted here (1,000 bytes in all) ...]")
    assert text.endswith("tail\n[stdout was 1,000 bytes; its middle is omitted above]")
