"""`ChatTemplateRenderer`: a Hugging Face tokenizer's chat template, with Hermes tool calls.

Models whose own chat template knows about tools use it unchanged. For models whose template has no tool
support (SmolLM2's, for one), evsys supplies `HERMES_CHATML_TEMPLATE`: ChatML turns, the tool schemas listed
in the system message, assistant tool calls written as `<tool_call>{"name": ..., "arguments":
{...}}</tool_call>` and tool results sent back as `<tool_response>` blocks in a user turn (the Hermes
convention that most open tool-calling models follow)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from evsys.model.base import Message, ToolSchema
from evsys.model.render.base import Renderer
from evsys.model.render.hermes import OPEN_TAG, parse_tool_calls
from evsys.records import ToolCall

HERMES_CHATML_TEMPLATE = r"""
{%- set ns = namespace(start=0) -%}
{%- if messages and messages[0].role == 'system' -%}
{%- set ns.start = 1 -%}
{%- endif -%}
{%- if tools or ns.start == 1 -%}
{{- '<|im_start|>system\n' -}}
{%- if ns.start == 1 -%}{{- messages[0].content -}}{%- endif -%}
{%- if tools -%}
{%- if ns.start == 1 -%}{{- '\n\n' -}}{%- endif -%}
{{- '# Tools\n\nYou can call the functions described inside <tools></tools> to help with the task.\n' -}}
{{- '<tools>\n' -}}
{%- for tool in tools -%}{{- tool | tojson -}}{{- '\n' -}}{%- endfor -%}
{{- '</tools>\n\nTo call a function, reply with one JSON object per call inside ' -}}
{{- '<tool_call></tool_call> tags:\n' -}}
{{- '<tool_call>\n{"name": <function-name>, "arguments": <arguments-object>}\n</tool_call>' -}}
{%- endif -%}
{{- '<|im_end|>\n' -}}
{%- endif -%}
{%- for message in messages[ns.start:] -%}
{%- set i = loop.index0 + ns.start -%}
{%- if message.role == 'tool' -%}
{%- if i == 0 or messages[i - 1].role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}
{{- '\n<tool_response>\n' + (message.content or '') + '\n</tool_response>' -}}
{%- if loop.last or messages[i + 1].role != 'tool' -%}{{- '<|im_end|>\n' -}}{%- endif -%}
{%- else -%}
{{- '<|im_start|>' + message.role + '\n' + (message.content or '') -}}
{%- if message.role == 'assistant' and message.tool_calls -%}
{%- for call in message.tool_calls -%}
{%- set fn = call.function if call.function is defined else call -%}
{%- if message.content or not loop.first -%}{{- '\n' -}}{%- endif -%}
{{- '<tool_call>\n{"name": "' + fn.name + '", "arguments": ' -}}
{%- if fn.arguments is string -%}{{- fn.arguments -}}{%- else -%}{{- fn.arguments | tojson -}}{%- endif -%}
{{- '}\n</tool_call>' -}}
{%- endfor -%}
{%- endif -%}
{{- '<|im_end|>\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}
""".strip()


def has_tool_support(chat_template: str | None) -> bool:
    """Whether a model's own chat template renders tool schemas (it mentions `tools`)."""
    return chat_template is not None and "tools" in chat_template


def select_template(tokenizer: Any) -> str:
    """The template evsys renders with: the model's own if it handles tools, else the Hermes/ChatML one."""
    own = getattr(tokenizer, "chat_template", None)
    if isinstance(own, str) and has_tool_support(own):
        return own
    return HERMES_CHATML_TEMPLATE


def render_prompt(
    tokenizer: Any, template: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> str:
    """Render `messages` (+ `tools`) with `template`, ending with the assistant generation prompt."""
    return tokenizer.apply_chat_template(
        _normalise(messages),
        tools=tools or None,
        chat_template=template,
        add_generation_prompt=True,
        tokenize=False,
    )


def _normalise(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Turn list-of-parts content (OpenAI's [{"type": "text", "text": ...}]) into plain strings."""
    out = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            parts = [p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"]
            message = {**message, "content": "".join(parts)}
        out.append(message)
    return out


class ChatTemplateRenderer(Renderer):
    """Renders with a tokenizer's chat template (or the Hermes/ChatML one) and parses Hermes tool calls.

    `end_token_ids` are the model's end-of-sequence ids (the generation config knows them, the tokenizer may
    not all); `template` overrides the choice `select_template` makes."""

    tool_call_markers = (OPEN_TAG,)

    def __init__(
        self, tokenizer: Any, end_token_ids: Iterable[int] = (), template: str | None = None
    ) -> None:
        self.tokenizer = tokenizer
        self.template = template or select_template(tokenizer)
        ends = set(end_token_ids)
        if tokenizer.eos_token_id is not None:
            ends.add(tokenizer.eos_token_id)
        self.end_token_ids = frozenset(ends)

    def render_text(self, messages: list[Message], tools: list[ToolSchema] | None = None) -> str:
        """The prompt as text (what `render` tokenises)."""
        return render_prompt(self.tokenizer, self.template, messages, tools)

    def render(self, messages: list[Message], tools: list[ToolSchema] | None = None) -> list[int]:
        """The prompt ids: the rendered template, tokenised without adding special tokens."""
        return self.encode(self.render_text(messages, tools))

    def encode(self, text: str) -> list[int]:
        """Tokenise `text` without adding special tokens (the template already placed them)."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        """Decode ids exactly (special tokens kept, no clean-up of spaces)."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def split_tool_calls(self, text: str) -> tuple[str, list[ToolCall]]:
        """Hermes `<tool_call>` blocks out of `text`."""
        return parse_tool_calls(text)
