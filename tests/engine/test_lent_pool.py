"""A sandbox pool the caller owns (`Job(..., sandboxes=pool)`, `run_rollouts(..., sandboxes=pool)`): a
trainer keeps one across its steps, so each step's trials start on the sandboxes the last step released,
reset. The jobs use it and never close it; closing it stops everything it holds."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from engine_tasks import SOLVE_OUT, make_task
from test_warm_job import sandbox_processes, sandboxes_of_this_process

from evsys.engine import Job, JobConfig
from evsys.engine.config import ExecutorSpec
from evsys.sandbox.pool import SandboxPool, SharePolicy
from evsys.sandbox.registry import create_sandbox

LEAVE_MARKS = "#!/bin/bash\necho ok > /app/out.txt\necho step1 > /app/mark\necho step1 > /var/tmp/mark\n"
NO_MARKS = (
    "#!/bin/bash\n"
    'if [ "$(cat /app/out.txt 2>/dev/null)" = ok ] && [ ! -e /app/mark ] && [ ! -e /var/tmp/mark ]\n'
    "then r=1; else r=0; fi\necho $r > /logs/verifier/reward.txt\n"
)
SEES_MARKS = (
    "#!/bin/bash\n"
    "if [ -e /app/mark ] && [ -e /var/tmp/mark ]; then r=1; else r=0; fi\n"
    "echo $r > /logs/verifier/reward.txt\n"
)


def dataset(root: Path, names: list[str], *, solve: str, test: str, toml: str | None = None) -> Path:
    """Tasks with one environment (so their sandboxes may serve each other's trials)."""
    for name in names:
        make_task(root, name, solve=solve, test=test, toml=toml)
    return root


def config(data: Path, name: str, **kw) -> JobConfig:
    return JobConfig(datasets=[data], jobs_dir=data.parent / "jobs", job_name=name, **kw)


@pytest.mark.needs_sandbox
async def test_the_next_step_runs_on_the_sandboxes_the_last_step_released_reset(tmp_path, eventually):
    names = ["a", "b", "c"]
    step1 = dataset(tmp_path / "step1", names, solve=LEAVE_MARKS, test=SEES_MARKS)
    step2 = dataset(tmp_path / "step2", names, solve=SOLVE_OUT, test=NO_MARKS)
    before = sandboxes_of_this_process()
    pool = SandboxPool.for_backend("local", max_idle=3)
    try:
        first = await Job(config(step1, "s1", n_concurrent=3), sandboxes=pool).run()
        # positive control: the marks were really left in the sandboxes the first step used
        assert [t.reward for t in first.trials] == [1.0] * 3
        # the job hands its sandboxes back to the pool (reset in the background), it does not stop them
        await eventually(lambda: pool.idle_count == 3, "the first step's three sandboxes idle in the pool")
        second = await Job(config(step2, "s2", n_concurrent=3), sandboxes=pool).run()
        assert [t.sandbox_reused for t in second.trials] == [True] * 3
        assert [t.reward for t in second.trials] == [1.0] * 3, "a reused sandbox kept the last step's files"
        assert len(sandboxes_of_this_process() - before) == 3  # still held by the open pool
    finally:
        await pool.close()
    assert sandboxes_of_this_process() - before == set()
    assert sandbox_processes() == []


@pytest.mark.needs_sandbox
async def test_a_cancelled_step_leaves_the_pool_serving_the_next(tmp_path, eventually):
    slow = dataset(tmp_path / "slow", ["a", "b"], solve="#!/bin/bash\nsleep 120\n", test=NO_MARKS)
    fast = dataset(tmp_path / "fast", ["c", "d"], solve=SOLVE_OUT, test=NO_MARKS)
    before = sandboxes_of_this_process()
    pool = SandboxPool.for_backend("local", max_idle=2)
    try:
        run = asyncio.create_task(Job(config(slow, "slow", n_concurrent=2), sandboxes=pool).run())
        await eventually(lambda: len(sandboxes_of_this_process() - before) >= 2, "both trials running")
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        result = await Job(config(fast, "fast", n_concurrent=2), sandboxes=pool).run()
        assert [t.reward for t in result.trials] == [1.0, 1.0]
    finally:
        await pool.close()
    assert sandboxes_of_this_process() - before == set()
    assert sandbox_processes() == []


async def test_a_pool_the_job_cannot_use_is_refused_before_anything_starts(tmp_path):
    data = dataset(tmp_path / "d", ["a"], solve=SOLVE_OUT, test=NO_MARKS)
    before = sandboxes_of_this_process()
    elsewhere = config(data, "procs", executor=ExecutorSpec(name="processes"))
    with pytest.raises(ValueError, match="in this process only"):
        await Job(elsewhere, sandboxes=SandboxPool.for_backend("local", max_idle=1)).run()
    with pytest.raises(ValueError, match="starts 'docker' sandboxes; the job runs on 'local'"):
        await Job(config(data, "other"), sandboxes=SandboxPool.for_backend("docker", max_idle=1)).run()
    shared = SandboxPool(create_sandbox, share=SharePolicy(slots_per_sandbox=2), backend="local")
    with pytest.raises(ValueError, match="shares sandboxes; trials need whole ones"):
        await Job(config(data, "shared"), sandboxes=shared).run()
    assert sandboxes_of_this_process() - before == set()


# Root in a trial of the first step tries to lower the file size limit of the sandbox's pid 1 (which every
# later command inherits) and raise its oom_score_adj; its test passes when both tries ran and prlimit works
# on another process (the positive control).
LOWER_PID1 = (
    "#!/bin/bash\nsleep 100 </dev/null >/dev/null 2>&1 & prlimit --pid $! --fsize=4096:4096; other=$?\n"
    "prlimit --pid 1 --fsize=4096:4096; pid1=$?; echo 1000 > /proc/1/oom_score_adj; oom=$?\n"
    "echo ok > /app/out.txt; echo $other $pid1 $oom > /app/attack.txt\n"
)
ATTACK_RAN = (
    '#!/bin/bash\nread other pid1 oom < /app/attack.txt\nif [ "$other" = 0 ] && [ -n "$pid1" ] '
    '&& [ "$oom" = 0 ]; then r=1; else r=0; fi\necho $r > /logs/verifier/reward.txt\n'
)
WRITE_A_FILE = "#!/bin/bash\nhead -c 1000000 /dev/zero > /app/data && echo ok > /app/out.txt\n"
WROTE_IT = (
    '#!/bin/bash\nif [ "$(stat -c %s /app/data)" = 1000000 ] && [ "$(cat /proc/1/oom_score_adj)" != 1000 ]\n'
    "then r=1; else r=0; fi\necho $r > /logs/verifier/reward.txt\n"
)


@pytest.mark.needs_sandbox
async def test_a_trial_cannot_lower_the_limits_the_next_steps_trial_inherits(tmp_path, eventually):
    step1 = dataset(tmp_path / "step1", ["attack"], solve=LOWER_PID1, test=ATTACK_RAN)
    step2 = dataset(tmp_path / "step2", ["innocent"], solve=WRITE_A_FILE, test=WROTE_IT)
    pool = SandboxPool.for_backend("local", max_idle=1)
    try:
        first = await Job(config(step1, "attack"), sandboxes=pool).run()
        assert [t.reward for t in first.trials] == [1.0], first.trials[0].failure  # the attack ran
        await eventually(lambda: pool.idle_count == 1, "the attacker's sandbox idle in the pool")
        second = await Job(config(step2, "innocent"), sandboxes=pool).run()
        assert [t.sandbox_reused for t in second.trials] == [True]
        assert [t.reward for t in second.trials] == [1.0], second.trials[0].failure
    finally:
        await pool.close()


# A task.toml naming no network mode: Harbor's default, a public network (slirp4netns here).
DEFAULT_NETWORK = (
    '[agent]\ntimeout_sec = 60.0\n[verifier]\ntimeout_sec = 60.0\n[environment]\nworkdir = "/app"\n'
)
# The first step's agent leaves marks, a closed loopback connection lingering (TIME_WAIT) and a listener.
LEAVE_CONNECTIONS = LEAVE_MARKS + (
    "python3 -c \"import socket; s = socket.create_server(('127.0.0.1', 8000)); "
    "c = socket.create_connection(('127.0.0.1', 8000)); a, _ = s.accept(); a.close(); c.close()\"\n"
    "nohup python3 -c \"import socket, time; s = socket.create_server(('0.0.0.0', 9000)); time.sleep(300)\" "
    ">/dev/null 2>&1 &\n"
)
SEES_CONNECTIONS = (
    '#!/bin/bash\nif [ -e /app/mark ] && [ "$(ss -Htan | grep -c WAIT)" -ge 1 ]; then r=1; else r=0; fi\n'
    "echo $r > /logs/verifier/reward.txt\n"
)
FRESH_NETWORK = (
    "#!/bin/bash\n"
    'if [ "$(cat /app/out.txt)" = ok ] && [ ! -e /app/mark ] && [ -z "$(ss -Htan)" ] '
    "&& ip -4 addr show tap0 | grep -q 10.0.2.100; then r=1; else r=0; fi\n"
    "echo $r > /logs/verifier/reward.txt\n"
)


@pytest.mark.needs_sandbox
async def test_the_next_step_on_default_network_tasks_reuses_their_sandboxes(tmp_path, eventually):
    names = ["a", "b"]
    step1 = dataset(
        tmp_path / "n1", names, solve=LEAVE_CONNECTIONS, test=SEES_CONNECTIONS, toml=DEFAULT_NETWORK
    )
    step2 = dataset(tmp_path / "n2", names, solve=SOLVE_OUT, test=FRESH_NETWORK, toml=DEFAULT_NETWORK)
    before = sandboxes_of_this_process()
    pool = SandboxPool.for_backend("local", max_idle=2)
    try:
        first = await Job(config(step1, "n1", n_concurrent=2), sandboxes=pool).run()
        # positive control: the first step's trials left their marks and a lingering connection
        assert [t.reward for t in first.trials] == [1.0] * 2, first.trials[0].failure
        await eventually(lambda: pool.idle_count == 2, "the first step's two sandboxes idle in the pool")
        second = await Job(config(step2, "n2", n_concurrent=2), sandboxes=pool).run()
        assert [t.sandbox_reused for t in second.trials] == [True] * 2
        # reset: no file, no socket of the last step, and a network (slirp4netns' tap0) again
        assert [t.reward for t in second.trials] == [1.0] * 2, second.trials[0].failure
    finally:
        await pool.close()
    assert sandboxes_of_this_process() - before == set()
    assert sandbox_processes() == []
