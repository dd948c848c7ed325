"""Red team: what one sandbox could do to another or to the host through names, kernel per-uid quotas,
socket families and /dev; and `[verifier] user = "agent"`. Each test first shows its attack ran."""

from __future__ import annotations

import socket

import pytest
from inotify_hog import HOG, ONE_INOTIFY, run_hog

from evsys.engine import AgentSpec, Job, JobConfig
from evsys.sandbox import SandboxError
from evsys.sandbox.local import cgroups
from evsys.sandbox.local import reset as reset_helper

pytestmark = pytest.mark.security

LONG = "task-" + "x" * 200


async def test_two_trials_of_a_long_named_task_run_side_by_side(make_sandbox):
    first = await make_sandbox(name=f"{LONG}-trial-1")
    await first.exec("setsid nohup sleep 4545.5 >/dev/null 2>&1 &")
    second = await make_sandbox(name=f"{LONG}-trial-2")
    assert first._cgroup.dirs != second._cgroup.dirs
    both = [(await sb.exec("pgrep -c -f '[4]545.5'; echo up")).stdout.split() for sb in (first, second)]
    assert both == [["1", "up"], ["0", "up"]]  # the first's process survived the second's start


async def test_a_start_that_collides_on_its_cgroup_never_kills_the_other_sandbox(make_sandbox, monkeypatch):
    monkeypatch.setattr(cgroups, "cgroup_name", lambda name: "evsys-collision-test")
    first = await make_sandbox()
    await first.exec("setsid nohup sleep 4646.5 >/dev/null 2>&1 &")
    with pytest.raises(SandboxError, match="already exists"):  # positive control: the collision happened
        await make_sandbox()
    r = await first.exec("pgrep -c -f '[4]646.5'; echo alive")
    assert r.stdout.split() == ["1", "alive"]


SOCKETS_PY = b"""
import errno, socket
def attempt(family, kind, protocol=0):
    try:
        socket.socket(family, kind, protocol).close()
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
for name, args in [("unix", (1, 1)), ("inet", (2, 1)), ("inet6", (10, 2)), ("netlink-route", (16, 3, 0)),
                   ("vsock", (40, 1)), ("netlink-sock-diag", (16, 3, 4)), ("packet", (17, 2))]:
    print(name, attempt(*args))
"""


def _host_can(family: int, kind: int, protocol: int = 0) -> bool:
    try:
        socket.socket(family, kind, protocol).close()
    except OSError:
        return False
    return True


@pytest.mark.parametrize("user", ["agent", "root"])
async def test_only_unix_inet_and_netlink_route_sockets_can_be_made(sandbox, user):
    if not (_host_can(40, socket.SOCK_STREAM) and _host_can(16, socket.SOCK_RAW, 4)):
        pytest.skip("this host's kernel has no vsock or sock_diag: the filter would prove nothing")
    r = await sandbox.exec("python3 -", stdin=SOCKETS_PY, user=user)
    got = dict(line.split() for line in r.stdout.splitlines())
    # positive control: the same program makes the sockets a task needs
    assert [got.get(k) for k in ("unix", "inet", "inet6", "netlink-route")] == ["ok"] * 4, r.stdout + r.stderr
    assert got["vsock"] == "EAFNOSUPPORT"  # works on this host (checked above): refused by the sandbox
    assert got["netlink-sock-diag"] == "EPROTONOSUPPORT"
    assert got["packet"] == "EAFNOSUPPORT"


async def test_one_sandbox_exhausting_inotify_instances_does_not_starve_another(make_sandbox):
    hog, other = await make_sandbox(), await make_sandbox()
    assert hog.agent_uid != other.agent_uid
    held = (await hog.exec(run_hog(), stdin=HOG)).stdout.split()
    # positive control: the hog took every instance its uid may have (EMFILE = 24), and a fresh process of
    # the same agent gets none
    assert len(held) == 2 and int(held[0]) > 0 and held[1] == "24", held
    assert (await hog.exec(ONE_INOTIFY)).stdout.split() == ["-1"]
    assert int((await other.exec(ONE_INOTIFY)).stdout) >= 0  # another sandbox's agent is not starved


async def test_each_sandbox_agent_has_its_own_uid_owning_its_files_across_resets(make_sandbox):
    first, second = await make_sandbox(), await make_sandbox()
    probe = "id -u; id -un; stat -c %u /app /home/agent; touch /app/new && stat -c %u /app/new"
    for sb in (first, second):
        uid = str(sb.agent_uid)
        assert (await sb.exec(probe)).stdout.split() == [uid, "agent", uid, uid, uid]
    assert len({first.agent_uid, second.agent_uid}) == 2 and min(first.agent_uid, second.agent_uid) >= 100_000
    for _ in range(2):  # the second reset of each maps the layers through the namespace kept from the first
        for sb in (first, second):
            uid = sb.agent_uid
            await sb.reset()
            assert sb.agent_uid == uid and uid in reset_helper._USERNS
            assert (await sb.exec(probe)).stdout.split() == [str(uid), "agent", str(uid), str(uid), str(uid)]


DEV_PROBE = (
    "stat -c %a /dev/shm; df -B1M --output=size /dev/shm | tail -1;"
    " head -c 200000000 /dev/zero > /dev/shm/fill; du -m /dev/shm/fill | cut -f1; rm /dev/shm/fill;"
    " echo x > /dev/fill; echo y > /dev/null && echo null-ok"
)
LOCK = "python3 -c 'import multiprocessing; lock = multiprocessing.Lock(); lock.acquire(); print(\"locked\")'"


async def test_dev_shm_is_shared_memory_for_all_and_dev_cannot_be_filled(make_sandbox):
    sb = await make_sandbox(storage_mb=256)
    for _ in range(2):  # at start, then after a reset (which rebuilds /dev)
        assert (await sb.exec(LOCK)).stdout == "locked\n"
        r = await sb.exec(DEV_PROBE, user="root")
        mode, size, filled, null = r.stdout.split()
        assert mode == "1777" and null == "null-ok"
        assert 0 < int(filled) <= int(size) <= 64  # the fill ran and stopped at the limit
        assert "No space left on device" in r.stderr
        assert "/dev/fill: Read-only file system" in r.stderr
        await sb.reset()


AS_AGENT_TEST = '#!/bin/bash\necho "verifier runs as $(id -un)"\necho 1 > /logs/verifier/reward.txt\n'


@pytest.mark.needs_sandbox
async def test_a_verifier_running_as_the_agent_writes_its_output_and_reward(tmp_path):
    task = tmp_path / "tasks" / "as-agent"
    (task / "tests").mkdir(parents=True)
    (task / "tests" / "test.sh").write_text(AS_AGENT_TEST)
    (task / "instruction.md").write_text("Nothing to do.\n")
    (task / "task.toml").write_text(
        '[task]\nname = "as-agent"\n[verifier]\ntimeout_sec = 30.0\nuser = "agent"\n'
        '[environment]\nworkdir = "/app"\n'
    )
    config = JobConfig(
        datasets=[tmp_path / "tasks"],
        jobs_dir=tmp_path / "jobs",
        job_name="as-agent",
        agents=[AgentSpec(name="nop")],
    )
    [trial] = (await Job(config).run()).trials
    outputs = list((tmp_path / "jobs").rglob("test-stdout.txt"))
    assert len(outputs) == 1, trial.failure
    assert (
        outputs[0].read_text() == "verifier runs as agent\n"
    )  # positive control: test.sh really ran, as the agent
    assert trial.failure is None and trial.reward == 1.0
