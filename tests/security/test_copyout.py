"""Red team: copying a trial's /logs out. Bombs are bounded inside the sandbox, links never lead out, and a
daemon that stops answering (or lies about a frame's length) is given up instead of hanging the job."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import tarfile

import pytest

from evsys.engine.logs import copy_logs_out
from evsys.records import DEFAULT_LIMITS, CopyOutLimits
from evsys.sandbox.base import SandboxError
from evsys.sandbox.local import client as client_mod
from evsys.sandbox.local.client import (
    HEADER,
    MAX_PAYLOAD,
    DaemonClient,
    FrameError,
    encode_frame,
    frame_prefix,
    parse_prefix,
)

GIB = 1 << 30


async def agent(sb, command: str) -> str:
    """Run the attack as the agent; its stdout (it must succeed)."""
    result = await sb.exec(command, user="agent", timeout=120)
    assert result.exit_code == 0, result.stderr
    return result.stdout


async def test_a_2gib_sparse_file_is_cut_to_what_is_allocated(make_sandbox, tmp_path):
    sb = await make_sandbox(storage_mb=64)
    try:
        out = await agent(sb, "truncate -s 2G /logs/agent/bomb && stat -c %s /logs/agent/bomb")
        assert out.split() == [str(2 * GIB)]  # positive control: the sparse bomb exists at full size
        await sb.exec("echo 1 > /logs/verifier/reward.txt", user="root")
        warnings = await copy_logs_out(sb, "/logs", tmp_path, DEFAULT_LIMITS)
    finally:
        await sb.stop()
    assert (tmp_path / "agent" / "bomb").stat().st_size < 1 << 20
    assert any("agent/bomb" in w and "sparse" in w for w in warnings), warnings
    assert (tmp_path / "verifier" / "reward.txt").read_text() == "1\n"


async def test_the_byte_cap_keeps_the_reward_and_cuts_the_rest(make_sandbox, tmp_path):
    sb = await make_sandbox(storage_mb=256)
    try:
        await agent(
            sb, "head -c 3M /dev/urandom > /logs/agent/a; head -c 3M /dev/urandom > /logs/artifacts/b"
        )
        await sb.exec(
            "head -c 2M /dev/zero > /logs/verifier/test-stdout.txt; echo 0.5 > /logs/verifier/reward.txt",
            user="root",
        )
        out = await agent(sb, "du -bc /logs | tail -1")
        assert int(out.split()[0]) > 8 << 20  # positive control: /logs holds more than 8 MiB
        limits = CopyOutLimits(max_bytes=4 << 20, max_file_bytes=1 << 20).resolved()
        warnings = await copy_logs_out(sb, "/logs", tmp_path, limits)
    finally:
        await sb.stop()
    assert (tmp_path / "verifier" / "reward.txt").read_text() == "0.5\n"
    copied = sum(p.stat().st_size for p in tmp_path.rglob("*") if p.is_file())
    assert copied <= 4 << 20
    assert (tmp_path / "verifier" / "test-stdout.txt").stat().st_size == 1 << 20
    assert any("test-stdout.txt" in w and "single-file cap" in w for w in warnings), warnings


async def test_the_tar_never_exceeds_the_byte_cap(make_sandbox):
    sb = await make_sandbox(storage_mb=256)
    long = "n" * 150  # names that need pax records
    try:
        await agent(
            sb, f"cd /logs/agent && for i in $(seq 300); do head -c 1000 /dev/urandom > {long}$i; done"
        )
        out = await agent(sb, "du -bc /logs/agent | tail -1")
        assert int(out.split()[0]) > 300_000  # positive control: well over the cap below
        limits = CopyOutLimits(max_bytes=100_000).resolved()
        tree = await sb.copy_out("/logs", limits)
    finally:
        await sb.stop()
    assert sum(len(c) for c in tree.chunks) == tree.size <= 100_000
    assert "byte cap (100000)" in tree.cut[-1]
    with tarfile.open(fileobj=tree.reader(), mode="r|") as tar:
        names = [m.name for m in tar]
    assert len(names) > 10 and all(n.startswith("logs") for n in names)  # a valid tar, what fits is kept


async def many_files_copy(make_sandbox, count: int, limits: CopyOutLimits):
    """The agent makes `count` empty files in /logs/agent/many; the bounded copy of /logs and its size."""
    sb = await make_sandbox(storage_mb=512)
    try:
        out = await agent(
            sb, f"mkdir /logs/agent/many && cd /logs/agent/many && seq {count} | xargs touch && ls -f | wc -l"
        )
        assert int(out) == count + 2  # positive control: the files exist (and . and ..)
        tree = await sb.copy_out("/logs", limits)
    finally:
        await sb.stop()
    with tarfile.open(fileobj=tree.reader(), mode="r|") as tar:
        members = sum(1 for _ in tar)
    return tree, members


async def test_a_file_bomb_is_bounded_by_the_entry_cap(make_sandbox):
    tree, members = await many_files_copy(make_sandbox, 20_000, CopyOutLimits(max_entries=1000).resolved())
    assert members == 1000  # the cap, not a clock, stopped the copy
    assert tree.cut_count == 1 and "entry cap (1000)" in tree.cut[0]


@pytest.mark.slow
async def test_500000_empty_files_stop_at_the_default_entry_cap(make_sandbox):
    tree, members = await many_files_copy(make_sandbox, 500_000, DEFAULT_LIMITS)
    assert members == DEFAULT_LIMITS.max_entries
    assert tree.cut_count == 1 and f"entry cap ({DEFAULT_LIMITS.max_entries})" in tree.cut[0]


async def test_a_symlink_chain_never_leads_out_of_the_trial_dir(make_sandbox, tmp_path):
    sb = await make_sandbox()
    chain = "cd /logs/agent && ln -s . l0 && " + " && ".join(f"ln -s l{i - 1}/.. l{i}" for i in range(1, 13))
    try:
        await agent(
            sb, chain + " && ln -s l12/etc/passwd leak && ln -s l0/inside.txt fine && echo hi > inside.txt"
        )
        # positive control: inside the sandbox the chain climbs to / and reaches /etc/passwd
        assert (await agent(sb, "readlink -f /logs/agent/leak")).strip() == "/etc/passwd"
        trial = tmp_path / "jobs" / "job" / "trial"
        trial.mkdir(parents=True)
        warnings = await copy_logs_out(sb, "/logs", trial, DEFAULT_LIMITS)
    finally:
        await sb.stop()
    agent_dir = trial / "agent"
    resolved = [os.path.realpath(e) for e in agent_dir.iterdir() if e.is_symlink()]  # noqa: ASYNC240
    assert resolved and all(r == str(agent_dir) or r.startswith(f"{agent_dir}/") for r in resolved)
    assert (agent_dir / "fine").read_text() == "hi\n"  # a link that stays inside is kept
    assert not (agent_dir / "leak").is_symlink() and not (agent_dir / "l12").is_symlink()
    assert any("l1 " in w and "resolves outside" in w for w in warnings), warnings


def test_frame_lengths_over_4gib_do_not_wrap():
    five = 5 * GIB + 7
    prefix = frame_prefix(123, five)
    assert len(prefix) == HEADER.size == 16
    assert parse_prefix(prefix, max_payload=8 * GIB) == (123, five)
    h = encode_frame({"op": "ping"}, b"xy")
    hlen, plen = parse_prefix(h[:16])
    assert plen == 2 and h[16 + hlen :] == b"xy"


def test_an_oversize_frame_is_refused_with_a_clear_error():
    with pytest.raises(FrameError, match="over the limit"):
        parse_prefix(frame_prefix(10, MAX_PAYLOAD + 1))
    with pytest.raises(FrameError):
        parse_prefix(frame_prefix(1 << 40, 0))


async def test_a_lying_frame_length_fails_requests_instead_of_hanging():
    reader = asyncio.StreamReader()
    reader.feed_data(encode_frame({"op": "ready", "pid": 1}))

    class Sink:
        def write(self, data):
            pass

        async def drain(self):
            pass

        def close(self):
            pass

    given_up = []
    client = DaemonClient(reader, Sink(), "liar", on_wedged=given_up.append)
    await client.wait_ready()
    pending = asyncio.ensure_future(client.request({"op": "ping"}))
    await asyncio.sleep(0)
    reader.feed_data(frame_prefix(40, 32 * GIB))  # the attack: a frame claiming 32 GiB
    with pytest.raises(SandboxError, match="over the limit"):
        await asyncio.wait_for(pending, 30)
    assert given_up and client.closed
    await client.close()


async def test_a_wedged_daemon_is_killed_not_waited_on(make_sandbox, monkeypatch):
    monkeypatch.setattr(client_mod, "CONTROL_TIMEOUT", 2.0)
    sb = await make_sandbox()
    pid = sb._daemon_pid()
    os.kill(pid, signal.SIGSTOP)
    for _ in range(100):  # the stop lands once the daemon is next scheduled
        if process_state(pid).startswith("T"):
            break
        await asyncio.sleep(0.05)
    assert process_state(pid).startswith("T")  # positive control: the daemon is stopped, cannot answer
    with pytest.raises(SandboxError, match="did not answer"):
        await asyncio.wait_for(sb.reset(), 60)
    with pytest.raises(SandboxError, match="not running"):
        await sb.exec("true")
    await asyncio.wait_for(sb.stop(), 60)
    assert process_state(pid) in ("", "Z")


def process_state(pid: int) -> str:
    """The State letter of a host process ("" once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return f.read().split("\nState:\t", 1)[1][:1]
    except (OSError, IndexError):
        return ""


def tar_bytes(tree) -> bytes:
    return b"".join(tree.chunks)


@pytest.mark.parametrize("depth", [40])
async def test_trees_deeper_than_the_depth_cap_are_left_out(make_sandbox, tmp_path, depth):
    sb = await make_sandbox()
    try:
        path = "/logs/agent/" + "/".join(["d"] * depth)
        await agent(sb, f"mkdir -p {path} && echo deep > {path}/f")
        assert (await agent(sb, f"cat {path}/f")).strip() == "deep"  # positive control
        tree = await sb.copy_out("/logs", CopyOutLimits(max_depth=10).resolved())
    finally:
        await sb.stop()
    with tarfile.open(fileobj=io.BytesIO(tar_bytes(tree)), mode="r:") as tar:
        deepest = max(m.name.count("/") for m in tar.getmembers())
    assert deepest <= 11
    assert any("depth cap (10" in line for line in tree.cut), tree.cut
