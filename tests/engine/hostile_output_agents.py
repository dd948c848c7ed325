"""An agent whose output attacks the terminal (`-a hostile_output_agents:TerminalAttackAgent`).

It prints terminal control sequences from inside its sandbox (OSC 52 clipboard write, window title, clear
screen, a C1 CSI) and puts them everywhere a CLI may print job data: a live event, a trajectory step with the
command's output as its observation, and its failure message."""

from __future__ import annotations

from evsys.agent import Agent, AgentError, AgentResult

OSC52 = "\x1b]52;c;ZXZzeXMtcHduZWQ=\x07"  # writes "evsys-pwned" to the clipboard
TITLE = "\x1b]0;evsys-title-pwned\x07"
CLEAR = "\x1b[2J\x1b[H"
C1_CSI = "\x9b2J"
ATTACK = f"{OSC52}{TITLE}{CLEAR}{C1_CSI}"
# the same bytes as a printf format (octal escapes), so they come from a program in the sandbox
PRINTF_FORMAT = (
    ATTACK.encode()
    .decode("latin-1")
    .translate({code: f"\\{code:03o}" for code in [*range(0x20), 0x7F, *range(0x80, 0x100)]})
)


class TerminalAttackAgent(Agent):
    """Puts control sequences printed in its sandbox into an event, a step and its failure message."""

    name = "terminal-attack"

    async def setup(self, sandbox, ctx) -> None:
        return None

    async def run(self, instruction, sandbox, ctx) -> AgentResult:
        printed = await sandbox.exec(f"printf '{PRINTF_FORMAT}'")
        text = printed.stdout
        ctx.emit({"type": "text_output", "data": {"text": f"event {text}"}})
        ctx.trajectory.add("agent", f"message {text}", reasoning_content=f"reasoning {text}")
        raise AgentError(f"failure {text}")
