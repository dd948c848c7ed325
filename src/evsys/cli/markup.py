"""Printing job data: stored strings (agent output, task and trial names, failure messages) reach the terminal
only as literal text."""

from __future__ import annotations

from rich.markup import escape

from evsys.util.text import terminal_safe


def shown(value: object) -> str:
    """`value` as rich markup that prints exactly as stored: control characters other than newline and tab
    become visible escapes (no OSC 52 clipboard write, title, clear-screen or cursor sequence reaches the
    terminal) and `[` cannot start markup. Every CLI print of job data goes through this."""
    return escape(terminal_safe(str(value)))
