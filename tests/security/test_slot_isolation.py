"""Shared slots (`SlotPool(slots_per_sandbox=N)`) against a hostile trajectory, on every backend of
SLOT_BACKENDS (tests/slot_backends.py): what one slot's code can do to the next trajectory that gets the same
slot after its release (the same uid, workspace and temporary directory), and to a neighbour slot running at
the same time in the same sandbox. Each test first shows its attack ran as the slot's uid (a positive
control), then that it failed. What shared slots cannot isolate is listed in docs/cloud.md ("Slots")."""

from __future__ import annotations

import os
from itertools import count

import pytest

from evsys.records import SandboxSpec
from evsys.sandbox.slots import Slot, SlotPool

pytestmark = pytest.mark.security
_names = count()
PTRACE_ATTACH = (
    'python3 -c "import ctypes, sys; libc = ctypes.CDLL(None, use_errno=True); '
    'r = libc.ptrace(16, int(sys.argv[1]), 0, 0); print(r, ctypes.get_errno())" '
)
SYSV = "awk -v u={uid} 'NR > 1 && ($8 == u || $10 == u)' /proc/sysvipc/shm /proc/sysvipc/msg; " + (
    "awk -v u={uid} 'NR > 1 && ($5 == u || $7 == u)' /proc/sysvipc/sem"
)


@pytest.fixture
async def pool(slot_backend):
    """Two slots per sandbox on the backend under test."""
    spec = SandboxSpec(name=f"slotred-{os.getpid()}-{next(_names)}")
    async with SlotPool(spec, backend=slot_backend, slots_per_sandbox=2) as made:
        yield made


async def run(pool: SlotPool, slot: Slot, command: str) -> tuple[bool, str, str]:
    """A tool call as the slot's user: ok, stdout, stderr."""
    result = await pool.exec_tool(slot, "bash", {"command": command})
    return result.success, result.output, result.error


async def root(slot: Slot, command: str) -> str:
    """A command as the sandbox's root (what the test sees of the sandbox)."""
    result = await slot.sandbox.exec(command, user="root", cwd="/")
    assert result.exit_code == 0, result.stderr
    return result.stdout


async def next_trajectory(pool: SlotPool, slot: Slot) -> Slot:
    """Release `slot` and take the slot the next trajectory gets: the same one (its uid, its workspace)."""
    await pool.release(slot)
    taken = await pool.acquire("next")
    assert (taken.sandbox, taken.uid, taken.workspace) == (slot.sandbox, slot.uid, slot.workspace)
    return taken


LEAVE_PROCESSES = (
    "sleep 1000 >/dev/null 2>&1 & setsid nohup sleep 1001 >/dev/null 2>&1 & (sleep 1002 >/dev/null 2>&1 &);"
    "bash -c 'trap \"\" TERM HUP; exec sleep 1003' >/dev/null 2>&1 & "
    "bash -c 'while :; do sleep 1004 & sleep 0.01; done' >/dev/null 2>&1 & "
    "sleep 1005 >/dev/null 2>&1 & kill -STOP $!; echo started"
)


async def test_no_process_of_a_released_slot_survives_and_its_neighbours_do(pool):
    attacker, neighbour = await pool.acquire("attacker"), await pool.acquire("neighbour")
    assert attacker.sandbox is neighbour.sandbox and attacker.uid != neighbour.uid
    assert (await run(pool, attacker, LEAVE_PROCESSES))[1] == "started\n"
    await run(pool, neighbour, "sleep 2000 >/dev/null 2>&1 & echo $!")
    left = await root(attacker, f"pgrep -U {attacker.uid} -f 'sleep 100[0-5]' | wc -l")
    assert int(left) >= 6  # positive control: the slot's processes run, as its uid
    nxt = await next_trajectory(pool, attacker)
    assert await root(nxt, f"pgrep -U {nxt.uid} -a || true") == ""
    survived = await root(nxt, f"pgrep -U {neighbour.uid} -f 'sleep 2000' | wc -l")
    assert survived.strip() == "1"  # the neighbour's process is left alone


PLANTS = (
    "echo w > mine.txt; mkdir -p .config/d;"
    "echo 'export EVIL=1' | tee .bashrc .profile .bash_profile >/dev/null;"
    'echo t > "$TMPDIR/left"; echo s > /tmp/plant; ln -s /etc/passwd /tmp/plant-link; mkdir /tmp/plant-dir;'
    "echo d > /tmp/plant-dir/f; chmod 777 /tmp/plant-dir; echo v > /var/tmp/plant; echo m > /dev/shm/plant;"
    "echo l > /run/lock/plant 2>/dev/null; echo planted"
)
SHARED_LISTING = "ls -A /tmp /var/tmp /dev/shm /run/lock"


async def test_files_a_released_slot_left_anywhere_are_gone_for_the_next_trajectory(pool):
    attacker, neighbour = await pool.acquire("attacker"), await pool.acquire("neighbour")
    await run(pool, neighbour, "echo n > /tmp/neighbours; echo n > /dev/shm/neighbours")
    assert (await run(pool, attacker, PLANTS))[1] == "planted\n"
    planted = await root(attacker, f"find /tmp /var/tmp /dev/shm {attacker.tmp} -uid {attacker.uid}")
    assert {"/tmp/plant", "/tmp/plant-link", "/tmp/plant-dir", "/dev/shm/plant"} <= set(planted.split())
    assert "plant" in await root(attacker, "ls /var/tmp")  # positive control: all of it there, as its uid
    nxt = await next_trajectory(pool, attacker)
    ok, out, _ = await run(pool, nxt, f'ls -A; ls -A "$TMPDIR"; {SHARED_LISTING}; env | grep EVIL; true')
    assert ok and "plant" not in out and "mine" not in out and "left" not in out and "EVIL" not in out
    login = await run(pool, nxt, "bash -lc 'echo ${EVIL:-clean}'")
    assert login[1] == "clean\n"
    assert "neighbours" in await root(nxt, "ls /tmp /dev/shm")  # a neighbour's files are left alone


async def test_ipc_objects_of_a_released_slot_are_gone(pool):
    attacker = await pool.acquire("attacker")
    ok, _, err = await run(pool, attacker, "ipcmk -M 4096 && ipcmk -Q && ipcmk -S 2")
    assert ok, err
    made = await root(attacker, SYSV.format(uid=attacker.uid))
    assert len(made.splitlines()) == 3  # positive control: three objects of the slot's uid
    nxt = await next_trajectory(pool, attacker)
    assert await root(nxt, SYSV.format(uid=nxt.uid)) == ""


VICTIM_FILES = (
    'echo secret > mine.txt; echo secret > "$TMPDIR/t"; echo secret > /tmp/victim; '
    "echo secret > /dev/shm/victim; echo ok"
)
READS = ["{ws}/mine.txt", "{tmp}/t", "/tmp/victim", "/dev/shm/victim"]


async def test_a_neighbour_cannot_read_or_change_another_slots_files(pool):
    victim, attacker = await pool.acquire("victim"), await pool.acquire("attacker")
    assert (await run(pool, victim, VICTIM_FILES))[1] == "ok\n"
    assert "victim" in (await run(pool, attacker, "ls /tmp /dev/shm"))[1]  # positive control: names in reach
    for path in READS:
        path = path.format(ws=victim.workspace, tmp=victim.tmp)
        assert (await root(victim, f"cat {path}")) == "secret\n"
        ok, out, err = await run(pool, attacker, f"cat {path}")
        assert not ok and "secret" not in out and "Permission denied" in err, path
        own = path.replace(victim.workspace, attacker.workspace).replace(victim.tmp, attacker.tmp)
        if own != path:  # positive control: the same attack on its own files works
            assert (await run(pool, attacker, f"echo mine > {own} && cat {own}"))[1] == "mine\n"
    for attack in (
        f"ls {victim.workspace}",
        f"echo evil > {victim.workspace}/mine.txt",
        f"ln -s /etc/passwd {victim.tmp}/link",
        "echo evil >> /tmp/victim",
        "rm -f /tmp/victim",
    ):
        ok, _, err = await run(pool, attacker, attack)
        assert not ok and ("Permission denied" in err or "Operation not permitted" in err), attack
    assert await root(victim, f"cat {victim.workspace}/mine.txt /tmp/victim") == "secret\nsecret\n"


async def test_a_neighbour_cannot_signal_or_inspect_another_slots_processes(pool):
    victim, attacker = await pool.acquire("victim"), await pool.acquire("attacker")
    pid = (await run(pool, victim, "SECRET=s3 sleep 1000 >/dev/null 2>&1 & echo $!"))[1].strip()
    mine = (await run(pool, attacker, "sleep 1001 >/dev/null 2>&1 & echo $!"))[1].strip()
    assert (await run(pool, attacker, f"head -c 5 /proc/{mine}/environ; kill -9 {mine}"))[
        0
    ]  # positive control
    for attack in (f"kill -9 {pid}", f"kill -STOP {pid}", f"cat /proc/{pid}/environ", f"ls /proc/{pid}/cwd/"):
        ok, out, _ = await run(pool, attacker, attack)
        assert not ok and "SECRET" not in out, attack
    state = (await root(victim, f"ps -o stat= -p {pid}")).strip()
    assert state[:1] in ("S", "R")  # alive, not stopped


async def test_a_neighbour_cannot_ptrace_another_slots_processes(pool):
    victim, attacker = await pool.acquire("victim"), await pool.acquire("attacker")
    pid = (await run(pool, victim, "sleep 1000 >/dev/null 2>&1 & echo $!"))[1].strip()
    own = await run(pool, attacker, f"sleep 1001 >/dev/null 2>&1 & {PTRACE_ATTACH} $!")
    if own[1].split() != ["0", "0"]:
        pytest.skip(
            f"ptrace is refused to every process in this sandbox (own process: {(own[1] or own[2]).strip()})"
        )
    attacked = await run(pool, attacker, f"{PTRACE_ATTACH} {pid}")
    assert attacked[1].split() == ["-1", "1"]  # EPERM


async def test_a_slot_cannot_take_another_uid_or_any_privilege(pool):
    victim, attacker = await pool.acquire("victim"), await pool.acquire("attacker")
    become = (
        f"python3 -c 'import os; os.setresuid({victim.uid}, {victim.uid}, {victim.uid}); print(os.getuid())'"
    )
    assert (await root(attacker, become)).strip() == str(victim.uid)  # positive control: root in it can
    ok, _, err = await run(pool, attacker, become)
    assert not ok and "PermissionError" in err
    status = "grep -E '^(CapEff|CapPrm|NoNewPrivs|Groups)' /proc/self/status"
    assert "0000000000000000" not in (await root(attacker, status)).split("CapEff:")[1].split()[0]
    seen = (await run(pool, attacker, status))[1]
    fields = {k: v.strip() for k, v in (line.split(":", 1) for line in seen.splitlines())}
    # no capability, no supplementary group, and no setuid or file-capability program can raise it
    assert fields == {"Groups": "", "CapPrm": "0" * 16, "CapEff": "0" * 16, "NoNewPrivs": "1"}
