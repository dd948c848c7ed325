"""`evsys run --stream`: one line per live event of a trial (its phases, the loop agent's turns, a harness's
events), printed as they happen."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.console import Console

from evsys.cli.markup import shown

MAX_TEXT = 160
STYLES = {
    "llm_request": "dim",
    "llm_response": "cyan",
    "tool_call": "yellow",
    "tool_result": "green",
    "text_output": "white",
    "error": "bold red",
    "turn_complete": "bold",
    "phase": "magenta",
    "turn": "magenta",
}


def _short(value: Any) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def describe(event: dict[str, Any]) -> str:
    """The human summary of one event (its type-specific fields, shortened)."""
    from evsys.engine.activity import event_text

    kind = event.get("type", "?")
    data = event.get("data") or {}
    now = event_text(event) if kind in ("phase", "turn") else None  # a trial's phase, a loop agent's turn
    if now is not None:
        return now
    if kind == "llm_request":
        call, model = data.get("call_index", "?"), data.get("model", "?")
        return f"call {call} to {model}, {data.get('messages', '?')} messages"
    if kind == "llm_response":
        tokens, tools = data.get("completion_tokens"), data.get("tool_calls") or []
        text = _short(data.get("error") or data.get("text") or "")
        extra = [f"tools: {', '.join(map(str, tools))}"] if tools else []
        extra += [f"{tokens} tokens"] if tokens else []
        return text + (f"  [{'; '.join(extra)}]" if extra else "")
    if kind == "tool_call":
        return f"{data.get('name', '?')} {_short(data.get('arguments', data.get('input', '')))}"
    if kind == "tool_result":
        return _short(data.get("output", data.get("content", "")))
    if kind == "turn_complete":
        status = data.get("status", "?")
        return status if status == "ok" else f"{status}: {_short(data.get('error', ''))}"
    return _short(data.get("text") or data.get("message") or data.get("error") or data)


def event_printer(console: Console) -> Callable[[dict[str, Any]], None]:
    """A callback for `Job(on_agent_event=...)` printing `trial  type  summary` lines."""

    def show(event: dict[str, Any]) -> None:
        kind = str(event.get("type", "?"))
        style = STYLES.get(kind, "white")
        trial = shown(str(event.get("trial", "")))
        console.print(
            f"[dim]{trial}[/] [{style}]{shown(f'{kind:<13}')}[/] {shown(describe(event))}",
            highlight=False,
            soft_wrap=True,
        )

    return show
