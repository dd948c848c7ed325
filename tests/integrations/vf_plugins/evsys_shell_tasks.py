"""A small verifiers (v1) taskset for evsys's integration tests: shell tasks and a scripted harness.

Each task's setup writes an input file into the runtime, the harness (the "agent") runs the task's
scripted solution in the runtime with `run_program`, and the reward reads the answer back with `read`.
One task's scripted solution is wrong on purpose, so the scores are not all equal. The harness makes no
model call: the comparison is about where the commands run, not about a model."""

from __future__ import annotations

import verifiers.v1 as vf
from verifiers.v1.clients import ModelContext
from verifiers.v1.configs.harness import HarnessConfig
from verifiers.v1.runtimes import ProgramResult, Runtime
from verifiers.v1.trace import Trace


class ShellData(vf.TaskData):
    """A shell task: an input file, the command that answers it, the expected answer."""

    input_text: str
    solution: str
    expected: str


class ShellTask(vf.Task[ShellData]):
    async def setup(self, trace: Trace, runtime: Runtime) -> None:
        await runtime.write("input.txt", self.data.input_text.encode())

    @vf.reward
    async def correct(self, runtime: Runtime) -> float:
        try:
            answer = (await runtime.read("answer.txt", max_bytes=4096)).decode().strip()
        except vf.SandboxError:
            return 0.0
        return 1.0 if answer == self.data.expected else 0.0

    @vf.metric
    async def input_lines(self, runtime: Runtime) -> float:
        result = await runtime.run(["sh", "-c", "wc -l < input.txt"], {})
        return float(result.stdout.strip() or -1)


TASKS = [
    ("count-words", "one two three\nfour five\n", "wc -w < input.txt | tr -d ' ' > answer.txt", "5"),
    ("uppercase", "evsys\n", "tr a-z A-Z < input.txt > answer.txt", "EVSYS"),
    ("sum-numbers", "1\n2\n3\n4\n", "head -n 2 input.txt | awk '{s += $1} END {print s}' > answer.txt", "10"),
    ("last-line", "a\nb\nc\n", "tail -n 1 input.txt > answer.txt", "c"),
]


class ShellTaskset(vf.Taskset[ShellTask]):
    def load(self):
        for name, input_text, solution, expected in TASKS:
            data = ShellData(
                name=name,
                prompt=f"Solve {name}.",
                input_text=input_text,
                solution=solution,
                expected=expected,
            )
            yield ShellTask(data, self.config.task)


class ScriptedHarness(vf.Harness[HarnessConfig]):
    """Runs the task's scripted solution in the runtime (the rollout's main program)."""

    NEEDS_CONTAINER = False

    async def launch(
        self,
        ctx: ModelContext,
        trace: Trace,
        runtime: Runtime,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: vf.TaskData,
    ) -> ProgramResult:
        assert isinstance(data, ShellData)
        return await runtime.run_program(["sh", "-c", data.solution], {})


__all__ = ["ScriptedHarness", "ShellTaskset"]
