"""Dockerfile syntax: instructions with their line numbers, line continuations, the `escape` parser directive
and heredocs (`RUN <<EOF` ... `EOF`, kept with their instruction)."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass
class Instruction:
    """One Dockerfile instruction: its keyword, raw arguments and the line it starts on."""

    line: int
    keyword: str
    args: str


HEREDOC = re.compile(r"<<(-?)([\"']?)([A-Za-z_][A-Za-z0-9_]*)\2")
_DIRECTIVE = re.compile(r"^#\s*([a-zA-Z]+)\s*=\s*(\S+)\s*$")


def split_instructions(text: str) -> list[Instruction]:
    """Split Dockerfile text into instructions: honour a leading `# escape=` parser directive, join line
    continuations, keep heredoc bodies (`RUN <<EOF` ... `EOF`) with their instruction, drop comments and
    blanks."""
    lines = text.splitlines()
    escape = "\\"
    for raw in lines:  # parser directives come first, before any other comment or instruction
        directive = _DIRECTIVE.match(raw.strip())
        if not directive:
            break
        if directive.group(1).lower() == "escape" and directive.group(2) in ("`", "\\"):
            escape = directive.group(2)
    out: list[Instruction] = []
    pending: list[str] = []
    start, i = 0, 0
    while i < len(lines):
        stripped = lines[i].strip()
        i += 1
        if stripped.startswith("#") or (not stripped and not pending):
            continue
        if not pending:
            start = i
        if stripped.endswith(escape):
            pending.append(stripped[:-1])
            continue
        pending.append(stripped)
        joined = " ".join(p.strip() for p in pending if p.strip())
        pending = []
        if joined.split(" ", 1)[0].upper() in ("RUN", "COPY", "ADD"):
            for strip_tabs, _, word in HEREDOC.findall(joined):
                body = []
                while i < len(lines) and (lines[i].lstrip("\t") if strip_tabs else lines[i]) != word:
                    body.append(lines[i])
                    i += 1
                i += 1  # the delimiter line
                joined += "\n" + "\n".join(body) + "\n" + word
        _append_instruction(out, start, joined)
    if pending:
        _append_instruction(out, start, " ".join(p.strip() for p in pending if p.strip()))
    return out


def _append_instruction(out: list[Instruction], line: int, text: str) -> None:
    keyword, _, args = text.partition(" ")
    out.append(Instruction(line=line, keyword=keyword.upper(), args=args.strip()))
