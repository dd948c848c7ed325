"""Agents for the resource-exhaustion tests, loaded by name (`exhaustion_agents:PidsAgent`): one answers
right, one wrong, the others answer wrong and then exhaust their own sandbox one way each (issue 38)."""

from __future__ import annotations

import os
import signal

from evsys.agent import Agent, AgentResult

# a survivor (agent user, its own session) that takes every free pid of the sandbox, and keeps taking them
HOLD_PIDS = """setsid python3 -c '
import os, threading, time
for fd in (0, 1, 2): os.close(fd)
while True:
    try: threading.Thread(target=time.sleep, args=(10**6,), daemon=True).start()
    except Exception: time.sleep(0.01)
' </dev/null >/dev/null 2>&1 &
sleep 2"""
# files in /dev/shm and /tmp up to the memory limit, no process left: tmpfs pages can be neither reclaimed
# nor killed
FILL_TMPFS = "head -c 200M /dev/zero > /dev/shm/fill; head -c 400M /dev/zero > /tmp/fill; exit 0"
# the last process becomes a small dd filling /tmp during the agent's own phase
DD_TMP = "exec dd if=/dev/zero of=/tmp/big bs=4k count=200000"
ATTACKS = {"pids": HOLD_PIDS, "tmpfs": FILL_TMPFS, "dd": DD_TMP}


class ExhaustingAgent(Agent):
    """`mode`: "right" (writes ok), "wrong" (writes no), or an attack of ATTACKS after a wrong answer."""

    name = "exhausting"
    mode = "wrong"

    async def setup(self, sandbox, ctx) -> None:
        return None

    async def run(self, instruction, sandbox, ctx) -> AgentResult:
        if self.mode == "crash":  # evsys's own failure: its daemon dies (killed from the host), no limit hit
            os.kill(sandbox._daemon_pid(), signal.SIGKILL)
        await sandbox.exec(f"echo {'ok' if self.mode == 'right' else 'no'} > /app/out.txt")
        if self.mode in ATTACKS:
            await sandbox.exec(ATTACKS[self.mode], timeout=60)
        return AgentResult()


def _agent(mode: str) -> type[ExhaustingAgent]:
    """The agent of one mode, as a class of its own (a job names agents by class)."""
    return type(f"{mode.capitalize()}Agent", (ExhaustingAgent,), {"mode": mode, "__module__": __name__})


RightAgent, WrongAgent = _agent("right"), _agent("wrong")
PidsAgent, TmpfsAgent, DdAgent = _agent("pids"), _agent("tmpfs"), _agent("dd")
CrashAgent = _agent("crash")
