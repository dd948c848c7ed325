"""Reading a failed build's output the way its author needs it: the line of *their* Dockerfile that failed and
the tool's own error lines (`E: Unable to locate package ...`), wherever they fall in a long log.

buildah numbers steps over the Dockerfile it was given, which evsys rewrites (CA `ARG` lines after each FROM,
stored base names), so step numbers mean nothing to the user; the failing instruction's text does. It is
matched against the user's instructions (whitespace-insensitively, line continuations joined), the k-th run of
an instruction text meaning its k-th occurrence in the file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from evsys.task.dockerfile_syntax import split_instructions

_STEP = re.compile(r"^(?:\[\d+/\d+\]\s+)?STEP \d+/\d+: (.*)$")
_FAILED_AT = re.compile(r'^(?:Error|error): building at STEP "(.*)": (.*)$')
_TOOL_ERROR = re.compile(
    r"^(E: |ERROR|Error|error|fatal|FATAL|npm ERR!)|command not found|No such file|Permission denied|"
    r"[Cc]annot |[Cc]ould not |[Uu]nable to |not found|\*\*\* "
)
_BUILDAH_NOISE = re.compile(r"^(subprocess exited with status|[Ee]rror:? building at STEP)")
MAX_ERROR_LINES = 12


@dataclass
class FailedStep:
    """Where a build failed: the user's Dockerfile line (None when it cannot be placed), the instruction as
    buildah ran it, buildah's reason, and the tool's own error lines from that step."""

    line: int | None
    instruction: str
    reason: str
    error_lines: list[str]

    def headline(self, dockerfile: str) -> str:
        """`Dockerfile:6: RUN apt-get install -y x: exit status 100` (the line left out when unknown)."""
        where = f"{dockerfile}:{self.line}" if self.line is not None else dockerfile
        return f"{where}: {self.instruction}: {self.reason}"


def failed_step(output: str, dockerfile_text: str) -> FailedStep | None:
    """The failing step of a build whose output is `output`, placed in `dockerfile_text` (the user's file);
    None when the output names no failing step (a timeout, a crash before the first step)."""
    lines = output.splitlines()
    failed = next((m for m in map(_FAILED_AT.match, reversed(lines)) if m), None)
    step_rows = [(i, m.group(1)) for i, m in enumerate(map(_STEP.match, lines)) if m]
    if failed is None and not step_rows:
        return None
    instruction = failed.group(1) if failed else step_rows[-1][1]
    reason = failed.group(2) if failed else "failed"
    start = step_rows[-1][0] + 1 if step_rows else 0
    errors = [
        line.strip()
        for line in lines[start:]
        if _TOOL_ERROR.search(line) and not _BUILDAH_NOISE.match(line) and line.strip()
    ]
    runs = sum(1 for _, text in step_rows if _normal(text) == _normal(instruction))
    line = _line_of(instruction, max(runs, 1), dockerfile_text)
    return FailedStep(line, instruction, reason, errors[-MAX_ERROR_LINES:])


def _line_of(instruction: str, occurrence: int, dockerfile_text: str) -> int | None:
    """The line the `occurrence`-th instruction with this text starts on in the user's Dockerfile."""
    wanted = _normal(instruction)
    seen = 0
    for ins in split_instructions(dockerfile_text):
        if _normal(f"{ins.keyword} {ins.args}") == wanted:
            seen += 1
            if seen == occurrence:
                return ins.line
    return None


def _normal(text: str) -> str:
    """An instruction compared without regard to spacing, continuations or the keyword's case."""
    text = re.sub(r"\\\s*\n", " ", text)
    keyword, _, rest = text.strip().partition(" ")
    return f"{keyword.upper()} {' '.join(rest.split())}"
