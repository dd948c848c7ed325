"""Constrained decoding for the local engine: JSON output (`response_format`) and forced tool calls.

An `OutputConstraint` says what a completion must be: a JSON value matching a schema, optionally framed by
literal text (the Hermes `<tool_call>\\n` ... `\\n</tool_call>` a forced tool call is written in). The
`lm-format-enforcer` library turns it into a character-level parser and, walking a prefix tree of the
tokenizer's vocabulary, into the set of tokens allowed next; the batching scheduler sets every other logit of
that row to -inf before sampling, and allows an end-of-sequence token only once the output is complete.

Logprobs stay raw: each recorded logprob is the log-softmax of the model's unmasked logits, exactly as for an
unconstrained request, so teacher forcing reproduces it (a token the constraint forced may have a low one).
Rows without a constraint do no per-step work at all.
"""

from __future__ import annotations

import logging
import re
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, model_validator

from evsys.model.base import ToolSchema
from evsys.model.render.hermes import CLOSE_TAG, OPEN_TAG

if TYPE_CHECKING:
    from evsys.model.local.engine import LocalEngine

log = logging.getLogger("evsys.model.local.constrain")
MAX_WHITESPACE = 2
"""Whitespace characters allowed in a row between JSON tokens: compact or shallowly indented JSON, never runs
of blank space a small model may fall into."""
JSON_OBJECT_SCHEMA: dict[str, Any] = {"type": "object"}
_CONTROL = re.compile("[\x00-\x09\x0b\x0c\x0e-\x1f\x7f]")
_TOKENIZER_DATA: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


class OutputConstraint(BaseModel):
    """What a constrained completion must be: `prefix`, then one JSON value valid against `json_schema`, then
    `suffix`, then the end of the turn."""

    json_schema: dict[str, Any] = Field(default_factory=lambda: dict(JSON_OBJECT_SCHEMA))
    prefix: str = ""
    suffix: str = ""
    tool_call: bool = Field(
        False, description="The output is a tool call; else it is content (never read as tool-call markup)."
    )

    @model_validator(mode="after")
    def _enforceable(self) -> OutputConstraint:
        from lmformatenforcer import JsonSchemaParser

        try:
            JsonSchemaParser(self.json_schema)
        except Exception as exc:  # the library raises bare Exception for some schemas
            raise ValueError(f"the JSON schema cannot be enforced: {exc}") from exc
        return self

    @classmethod
    def for_json(cls, schema: dict[str, Any] | None = None) -> OutputConstraint:
        """A JSON object (`response_format` json_object), or a value valid against `schema` (json_schema)."""
        return cls(json_schema=schema if schema is not None else dict(JSON_OBJECT_SCHEMA))

    @classmethod
    def for_tool_call(cls, tools: Sequence[ToolSchema], name: str | None = None) -> OutputConstraint:
        """One Hermes tool call of one of `tools` (of the tool `name` when given) with schema-valid arguments.

        Raises ValueError when there is no such tool."""
        functions = [t.get("function", t) for t in tools]
        chosen = [f for f in functions if name is None or f.get("name") == name]
        if not chosen:
            offered = ", ".join(repr(f.get("name")) for f in functions) or "none"
            wanted = f"a tool named {name!r}" if name else "a tool"
            raise ValueError(f"tool_choice asks for {wanted} but the request offers {offered}")
        calls = [_call_schema(f) for f in chosen]
        schema = calls[0] if len(calls) == 1 else {"anyOf": calls}
        return cls(json_schema=schema, prefix=OPEN_TAG + "\n", suffix="\n" + CLOSE_TAG, tool_call=True)

    def start(self, engine: LocalEngine) -> TokenConstraint:
        """The per-generation state that gives the allowed tokens (blocking the first time for a tokenizer:
        run it off the event loop)."""
        from lmformatenforcer import (
            CharacterLevelParserConfig,
            JsonSchemaParser,
            SequenceParser,
            StringParser,
            TokenEnforcer,
        )

        data = tokenizer_data(engine)
        config = CharacterLevelParserConfig(
            alphabet=data.tokenizer_alphabet, max_consecutive_whitespaces=MAX_WHITESPACE
        )
        parsers: list[Any] = [JsonSchemaParser(self.json_schema, config)]
        if self.prefix:
            parsers.insert(0, StringParser(self.prefix))
        if self.suffix:
            parsers.append(StringParser(self.suffix))
        parser = parsers[0] if len(parsers) == 1 else SequenceParser(parsers)
        enforcer = TokenEnforcer(data, parser)
        parser.config = config  # the enforcer resets the root parser's config to the library's defaults
        return TokenConstraint(enforcer, sorted(engine.eos_ids))


def reads_tool_calls(constraint: OutputConstraint | None) -> bool:
    """Whether a completion generated under `constraint` is read for tool calls: yes unless it is JSON content
    (a JSON string may well hold `<tool_call>`)."""
    return constraint is None or constraint.tool_call


class TokenConstraint:
    """One generation's constraint: which token ids may come next after the ids generated so far."""

    def __init__(self, enforcer: Any, end_ids: list[int]) -> None:
        self._enforcer = enforcer
        self._end_ids = end_ids

    def allowed(self, generated: list[int]) -> list[int]:
        """The ids allowed after `generated` (end-of-sequence ids only once the output is complete). Should
        the library fail, the generation ends (its row only; the batch goes on)."""
        try:
            return list(self._enforcer.get_allowed_tokens(generated).allowed_tokens)
        except Exception:
            log.exception("constrained decoding failed after %d tokens; ending it", len(generated))
            return list(self._end_ids)

    def mask(self, logprobs: Any, generated: list[int]) -> Any:
        """`logprobs` with every token not allowed after `generated` set to -inf (a new tensor)."""
        import torch

        allowed = torch.tensor(self.allowed(generated), dtype=torch.long)
        allowed = allowed[allowed < logprobs.numel()]
        masked = torch.full_like(logprobs, float("-inf"))
        masked[allowed] = logprobs[allowed]
        return masked


def tokenizer_data(engine: LocalEngine) -> Any:
    """lm-format-enforcer's view of the engine's vocabulary (its prefix tree), built once per tokenizer."""
    from lmformatenforcer import TokenEnforcerTokenizerData

    tokenizer = engine.tokenizer
    data = _TOKENIZER_DATA.get(tokenizer)
    if data is None:
        size = len(tokenizer)
        data = TokenEnforcerTokenizerData(
            _regular_tokens(engine, size), _decoder(engine), sorted(engine.eos_ids), False, size
        )
        _TOKENIZER_DATA[tokenizer] = data
    return data


def _regular_tokens(engine: LocalEngine, size: int) -> list[tuple[int, str, bool]]:
    """(id, text, starts a word) of every non-special token that can appear in JSON text; the text is decoded
    after a '0' token so a leading space survives, as lm-format-enforcer expects. Tokens holding a control
    character other than a line break are left out (strict JSON parsers refuse them inside strings, and
    lm-format-enforcer would let them in), and so are tokens holding part of a UTF-8 character (the parser
    cannot follow a character split over tokens): constrained text uses characters the vocabulary holds
    whole."""
    special = set(engine.tokenizer.all_special_ids) | engine.eos_ids
    zero = engine.encode("0")[-1]
    tokens = []
    for token in range(size):
        if token in special:
            continue
        after_zero = engine.decode([zero, token])[1:]
        alone = engine.decode([token])
        if not _CONTROL.search(after_zero) and "\ufffd" not in alone:
            tokens.append((token, after_zero, len(after_zero) > len(alone)))
    return tokens


def _decoder(engine: LocalEngine) -> Any:
    def decode(ids: list[int]) -> str:
        return engine.decode(ids).rstrip("\ufffd")

    return decode


def _call_schema(function: dict[str, Any]) -> dict[str, Any]:
    """The JSON schema of a Hermes tool call of `function`: its name, and arguments valid for it."""
    arguments = function.get("parameters") or {"type": "object", "properties": {}}
    return {
        "type": "object",
        "properties": {"name": {"type": "string", "enum": [function["name"]]}, "arguments": arguments},
        "required": ["name", "arguments"],
    }
