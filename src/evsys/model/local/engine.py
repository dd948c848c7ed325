"""The in-process generation engine: a transformers causal LM on CPU, driven token by token.

Token fidelity is the point. The prompt ids are the tokenisation of the rendered chat template, exactly as fed
to the model; the completion ids are exactly the sampled ids (including a final end-of-sequence token); each
logprob is the log-softmax of the model's **raw** logits at that step (before temperature, top-k, top-p or the
mask of a constrained request, `evsys.model.local.constrain`), so teacher forcing the same ids through the
same model reproduces them. This matches what vLLM reports by default.

The engine is synchronous and not thread-safe; `LocalModelClient` runs it in one worker thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from evsys.model.base import SamplingParams
from evsys.model.errors import ContextOverflowError
from evsys.model.local.loader import load_model_and_tokenizer
from evsys.model.render import ChatTemplateRenderer, find_stop

TokenCallback = Callable[[int, float], None]


@dataclass
class GenerationResult:
    """What one generation produced: the sampled ids (a final end-of-sequence token included), the logprob of
    each, why it ended and which weights version sampled it. `LocalEngine.renderer.parse` turns the ids into
    text and tool calls."""

    completion_ids: list[int]
    logprobs: list[float]
    finish_reason: Literal["stop", "length"]
    weights_version: int | None = None
    top_logprobs: list[list[tuple[int, float]]] | None = None  # with SamplingParams.top_logprobs > 0


class LocalEngine:
    """A causal LM plus its tokenizer and renderer, with token-exact generation and re-scoring."""

    def __init__(self, model: Any, tokenizer: Any, name: str = "local") -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.context_window = _context_window(model.config)
        self.eos_ids = _eos_ids(model, tokenizer)
        self.renderer = ChatTemplateRenderer(tokenizer, self.eos_ids)
        self.weights_version = 0
        """Bumped by every `replace_weights`; each generation records the version that sampled it."""

    @property
    def template(self) -> str:
        """The chat template prompts are rendered with."""
        return self.renderer.template

    @classmethod
    def load(cls, model_dir: Path, name: str = "local") -> LocalEngine:
        """Load the model in `model_dir` (blocking: call it from a worker thread)."""
        model, tokenizer = load_model_and_tokenizer(model_dir)
        return cls(model, tokenizer, name=name)

    def render(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> tuple[str, list[int]]:
        """The prompt text for a chat and its token ids (exactly what `generate` will feed the model)."""
        text = self.renderer.render_text(messages, tools)
        return text, self.renderer.encode(text)

    def encode(self, text: str) -> list[int]:
        """Tokenise `text` without adding special tokens (the template already placed them)."""
        return self.renderer.encode(text)

    def decode(self, ids: list[int]) -> str:
        """Decode ids exactly (special tokens kept, no clean-up of spaces)."""
        return self.renderer.decode(ids)

    def budget(self, prompt_len: int, max_tokens: int | None) -> int:
        """The number of tokens to generate; raises ContextOverflowError when the request cannot fit."""
        room = self.context_window - prompt_len
        wanted = max_tokens if max_tokens is not None else room
        if prompt_len + wanted > self.context_window or room < 1:
            raise ContextOverflowError(
                f"prompt of {prompt_len} tokens + max_tokens {wanted} exceeds the context window of "
                f"{self.context_window} tokens of model {self.name!r}",
                prompt_tokens=prompt_len,
                max_tokens=wanted,
                context_window=self.context_window,
            )
        return wanted

    def replace_weights(self, state_dict: Mapping[str, Any], version: int | None = None) -> int:
        """Copy `state_dict` into the model in place (every key must match); `weights_version` becomes
        `version` (the trainer's step, say; never lower than the current one) or goes up by one.

        Not synchronised with generation: a running engine's weights are replaced through
        `LocalModelClient.load_weights`, which waits until no generation is in flight."""
        import torch

        if version is not None and version < self.weights_version:
            raise ValueError(f"weights version {version} is older than the loaded {self.weights_version}")
        with torch.no_grad():
            self.model.load_state_dict(state_dict, strict=True)
        self.weights_version = self.weights_version + 1 if version is None else version
        return self.weights_version

    def generate(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        on_token: TokenCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> GenerationResult:
        """Sample a completion for `prompt_ids` (blocking); stop on EOS, a stop string or the budget."""
        import torch

        limit = self.budget(len(prompt_ids), params.max_tokens)
        generator = make_generator(params.seed)
        version = self.weights_version
        ids: list[int] = []
        logprobs: list[float] = []
        finish: Literal["stop", "length"] = "length"
        with torch.inference_mode():
            out = prefill(self.model, prompt_ids)
            while True:
                step_logprobs = torch.log_softmax(out.logits[0, -1].float(), dim=-1)
                token = sample(step_logprobs, params, generator)
                ids.append(token)
                logprobs.append(float(step_logprobs[token]))
                if on_token is not None:
                    on_token(token, logprobs[-1])
                if token in self.eos_ids and not params.ignore_eos:
                    finish = "stop"
                    break
                if params.stop and find_stop(self.decode(ids), params.stop) is not None:
                    finish = "stop"
                    break
                if len(ids) >= limit or (cancel is not None and cancel.is_set()):
                    break
                out = self.model(
                    input_ids=torch.tensor([[token]]), past_key_values=out.past_key_values, use_cache=True
                )
        return GenerationResult(ids, logprobs, finish, version)

    def score(self, prompt_ids: list[int], completion_ids: list[int]) -> list[float]:
        """Teacher forcing: the raw-distribution logprob of each completion token given all before it."""
        import torch

        with torch.inference_mode():
            logits = self.model(input_ids=torch.tensor([prompt_ids + completion_ids])).logits[0]
            start = len(prompt_ids) - 1
            logp = torch.log_softmax(logits[start : start + len(completion_ids)].float(), dim=-1)
            picked = logp.gather(1, torch.tensor(completion_ids).unsqueeze(1)).squeeze(1)
        return [float(x) for x in picked]


def prefill(model: Any, prompt_ids: list[int]) -> Any:
    """Run the prompt through the model, keeping only the last position's logits when the model allows it."""
    import torch

    ids = torch.tensor([prompt_ids])
    try:
        return model(input_ids=ids, use_cache=True, logits_to_keep=1)
    except TypeError:  # models without `logits_to_keep`
        return model(input_ids=ids, use_cache=True)


def sample(logprobs: Any, params: SamplingParams, generator: Any) -> int:
    """Pick the next token: argmax at temperature 0, else temperature, top-k and top-p sampling."""
    import torch

    if params.temperature == 0:
        return int(torch.argmax(logprobs))
    scores = logprobs / params.temperature
    if params.top_k is not None and params.top_k < scores.numel():
        kth = torch.topk(scores, params.top_k).values[-1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    if params.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        keep = torch.cumsum(sorted_probs, dim=-1) - sorted_probs < params.top_p
        keep[0] = True
        probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_probs[keep])
    return int(torch.multinomial(probs, 1, generator=generator))


def make_generator(seed: int | None) -> Any:
    """A torch RNG seeded with `seed` (or from OS entropy when None)."""
    import torch

    generator = torch.Generator()
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(seed)
    return generator


def _context_window(config: Any) -> int:
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return 2048


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), model.config):
        value = getattr(source, "eos_token_id", None) if source is not None else None
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list):
            ids.update(v for v in value if isinstance(v, int))
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids
