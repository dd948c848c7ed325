"""Stateful shell sessions and kill_processes."""

from __future__ import annotations

import asyncio


async def test_shell_keeps_cwd_and_exported_env(sandbox):
    sh = await sandbox.shell()
    await sh.run("mkdir -p /tmp/a/b && cd /tmp/a/b && export GREETING=hello && LOCAL=1")
    r = await sh.run("pwd; echo $GREETING")
    assert r.stdout == "/tmp/a/b\nhello\n"
    await sh.run("unset GREETING; cd /")
    r = await sh.run("pwd; echo ${GREETING:-unset}")
    assert r.stdout == "/\nunset\n"
    await sh.close()


async def test_shell_timeout_kills_only_that_command(sandbox):
    sh = await sandbox.shell(cwd="/tmp")
    await sh.run("export KEEP=yes")
    r = await sh.run("echo partial; sleep 30", timeout=0.5)
    assert r.timed_out and r.stdout == "partial\n"
    r = await sh.run("echo $KEEP; pwd")
    assert r.stdout == "yes\n/tmp\n"


async def test_shell_exit_code_and_exit_builtin(sandbox):
    sh = await sandbox.shell()
    r = await sh.run("cd /tmp; exit 4")
    assert r.exit_code == 4
    assert (await sh.run("pwd")).stdout == "/tmp\n"


async def test_kill_processes_kills_setsid_nohup_escapee(sandbox):
    r = await sandbox.exec("setsid nohup sleep 1000 >/dev/null 2>&1 & echo started")
    assert r.stdout == "started\n"
    alive = await sandbox.exec("for i in $(seq 100); do pgrep -x sleep && break; sleep 0.05; done")
    assert alive.stdout.strip().isdigit()
    killed = await sandbox.kill_processes()
    assert killed >= 1
    after = await sandbox.exec("pgrep -c -x sleep || true")
    assert after.stdout.strip() == "0"


async def test_kill_processes_ends_running_execs_and_daemon_survives(sandbox):
    pending = asyncio.ensure_future(sandbox.exec("sleep 100"))
    await asyncio.sleep(0.3)
    await sandbox.kill_processes()
    r = await asyncio.wait_for(pending, 10)
    assert r.exit_code == 137
    assert (await sandbox.exec("echo alive")).stdout == "alive\n"
