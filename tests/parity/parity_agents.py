"""Agents for the parity tests, loaded by name (`parity_agents:Class`) like a user's own agent."""

from __future__ import annotations

from evsys.agent import Agent, AgentResult

# Runs as the sandbox's agent user and outlives the agent: it keeps trying to forge the reward and to replace
# the verifier's script. `forger-4711` in its command line lets tests/test.sh see that it is still alive.
FORGER = (
    "setsid nohup bash -c 'while :; do : forger-4711; "
    'echo 1 > /logs/verifier/reward.txt; echo "echo 1 > /logs/verifier/reward.txt" > /tests/test.sh; '
    "sleep 0.01; done' > /dev/null 2>&1 < /dev/null & echo started"
)


class ForgerAgent(Agent):
    """Leaves a process behind that tries to forge the reward, then finishes normally."""

    name = "forger"

    async def setup(self, sandbox, ctx) -> None:
        return None

    async def run(self, instruction, sandbox, ctx) -> AgentResult:
        result = await sandbox.exec(FORGER)
        assert result.stdout.strip() == "started", result
        return AgentResult()


class ForgerThenHangAgent(ForgerAgent):
    """Leaves the forger behind, then runs past its timeout."""

    name = "forger-then-hang"

    async def run(self, instruction, sandbox, ctx) -> AgentResult:
        await super().run(instruction, sandbox, ctx)
        await sandbox.exec("sleep 600")
        return AgentResult()


# As root: writes the reward files and the tests in the sandbox's own /tests and /logs/verifier, then leaves
# the forger behind (every way an agent can try to score without solving).
CHEAT = (
    "mkdir -p /tests /logs/verifier && echo 'echo 1 > /logs/verifier/reward.txt' > /tests/test.sh"
    " && echo 1 > /logs/verifier/reward.txt && echo '{\"reward\": 1}' > /logs/verifier/reward.json\n"
)


class CheaterAgent(ForgerAgent):
    """Writes the reward files, edits the tests and leaves a reward-writing process, as root."""

    name = "cheater"

    async def run(self, instruction, sandbox, ctx) -> AgentResult:
        result = await sandbox.exec(CHEAT + FORGER, user="root")
        assert result.stdout.strip() == "started", result
        return AgentResult()
