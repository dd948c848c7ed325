"""model/render: the renderer contract (a toy renderer, no model) and the chat-template renderer the local
engine uses, checked against what the engine actually fed the model and produced."""

from __future__ import annotations

from collections.abc import Sequence

from evsys.model import SamplingParams
from evsys.model.render import ChatTemplateRenderer, Renderer, parse_tool_calls
from evsys.records import ToolCall
from evsys.testing.tiny_model import DEMO_BASH_TOOL


class CharRenderer(Renderer):
    """One token per character; token 0 ends the turn; Hermes tool calls."""

    end_token_ids = frozenset({0})
    tool_call_markers = ("<tool_call>",)

    def render(self, messages, tools=None) -> list[int]:
        return self.encode("".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant: ")

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(chr(i) for i in ids)

    def split_tool_calls(self, text: str) -> tuple[str, list[ToolCall]]:
        return parse_tool_calls(text)


def test_parse_drops_the_end_token_cuts_at_stop_and_splits_tool_calls():
    """What any renderer's parse gives: raw text without the end token, visible text cut at the first stop
    string, and the content separated from its tool calls."""
    renderer = CharRenderer()
    assert renderer.render([{"role": "user", "content": "hi"}]) == renderer.encode("user: hi\nassistant: ")
    call = '<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls"}}\n</tool_call>'
    parsed = renderer.parse([*renderer.encode(f"Let me look.\n{call}"), 0])
    assert parsed.raw_text == f"Let me look.\n{call}"
    assert parsed.text == "Let me look."
    assert [(c.function_name, c.arguments) for c in parsed.tool_calls] == [("bash", {"cmd": "ls"})]
    stopped = renderer.parse(renderer.encode("one. STOP two <tool_call>{}"), stop=["STOP"])
    assert (stopped.raw_text, stopped.visible_text, stopped.text) == (
        "one. STOP two <tool_call>{}",
        "one. ",
        "one. ",
    )
    assert stopped.tool_calls == []


async def test_the_local_engine_renders_and_parses_with_its_renderer(tiny_client, tiny_model_dir):
    """A renderer built from the model's tokenizer gives exactly the prompt ids the engine fed the model, and
    reads the engine's completion ids back into the same text and tool calls."""
    from transformers import AutoTokenizer

    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Say hello."},
    ]
    done = await tiny_client.complete(
        messages, tools=[DEMO_BASH_TOOL], params=SamplingParams(temperature=0, max_tokens=24)
    )
    engine = await tiny_client.engine()
    renderer = ChatTemplateRenderer(AutoTokenizer.from_pretrained(tiny_model_dir), engine.eos_ids)
    assert renderer.render(messages, [DEMO_BASH_TOOL]) == done.prompt_token_ids
    parsed = renderer.parse(done.completion_token_ids)
    assert (parsed.raw_text, parsed.text) == (done.raw_text, done.text)
    assert [c.function_name for c in parsed.tool_calls] == [c.function_name for c in done.tool_calls]
    assert renderer.tool_call_markers == ("<tool_call>",)
