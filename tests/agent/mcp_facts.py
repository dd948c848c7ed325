"""The `mcp-facts` task (it ships a stdio MCP server with one tool, `lookup_fact`) and a tiny model scripted
to call that tool, from the loop agent and from Claude Code.

The model (a long context window: Claude Code's prompts are long) is trained on the loop agent's first
request (its system prompt, the instruction, its tools and the task's tool) answered with the call, then
`submit` after the tool's answer; and on Claude Code's first request (captured from Claude Code 2.1.330 run
with `--system-prompt` and `--tools=`, so only the task's tool is offered) answered with the same call,
under a few dates, since Claude Code tells the model today's date."""

from __future__ import annotations

import json
from pathlib import Path

from evsys.agent.loop import LoopAgent
from evsys.agent.tools import TOOL_SCHEMAS
from evsys.testing.tiny_model import TinyModelRecipe, TrainingChat

TASK_DIR = Path(__file__).with_name("data") / "mcp-facts"
CLAUDE_REQUEST = Path(__file__).parents[1] / "harness" / "data" / "claude-code-mcp-request.json"
CLAUDE_ARGS = ["--system-prompt", "You are an agent. Use your tools.", "--tools="]
TOOL_NAME = "mcp__facts__lookup_fact"
TOOL_SCHEMA = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Look up a fact about a topic.",
        "parameters": {
            "type": "object",
            "properties": {"topic": {"type": "string"}},
            "required": ["topic"],
        },
    },
}
ANSWER = "A kumquat is a small citrus fruit."
DATES = ("2026-11-26", "2026-12-24", "2027-03-09", "2027-08-31")


def _call(name: str, arguments: dict, call_id: str = "c") -> dict:
    function = {"name": name, "arguments": json.dumps(arguments)}
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }


def _loop_chats() -> list[TrainingChat]:
    start = LoopAgent().initial_messages((TASK_DIR / "instruction.md").read_text())
    tools = [*TOOL_SCHEMAS, TOOL_SCHEMA]
    lookup = _call(TOOL_NAME, {"topic": "kumquat"})
    answer = {"role": "tool", "tool_call_id": "c", "content": ANSWER}
    return [
        TrainingChat(messages=[*start, lookup], tools=tools),
        TrainingChat(messages=[*start, lookup, answer, _call("submit", {})], tools=tools),
    ]


def _claude_chats() -> list[TrainingChat]:
    captured = json.loads(CLAUDE_REQUEST.read_text())
    text = json.dumps(captured["messages"])
    chats = []
    for date in DATES:
        messages = json.loads(text.replace("Today's date is 2026-11-26", f"Today's date is {date}"))
        chats.append(TrainingChat(messages=[*messages, _call(TOOL_NAME, {"topic": "kumquat"}, "toolu_1")],
                                  tools=captured["tools"]))  # fmt: skip
    return chats


def mcp_recipe() -> TinyModelRecipe:
    """The tiny model scripted to call the task's MCP tool (see the module docstring); its tokenizer learns
    the chats' text, so Claude Code's prompt stays short."""
    chats = [*_loop_chats(), *_claude_chats()]
    return TinyModelRecipe(chats=chats, vocab_size=2048, context_window=32768, train_steps=300, seed=3,
                           min_target_prob=0.999)  # fmt: skip
