"""The cookbook's `TokenCompleter` over evsys's local engine: a policy for the cookbook's rollout code that
needs no Tinker service.

`LocalTokenCompleter(LocalModelClient(model_dir), max_tokens=256)` samples from the prompt tokens the cookbook
hands it, exactly as given, on the in-process engine (batched with every other request), and returns the
sampled token ids (the end-of-sequence or stop token kept last, as Tinker does) with the raw-distribution
logprob of each, so a teacher-forced recompute of the same ids under the same weights reproduces them. Stop
conditions are the cookbook's: stop strings, or stop token ids (a renderer's end-of-turn token).
"""

from __future__ import annotations

import itertools

import tinker
from tinker_cookbook.completers import StopCondition, TokenCompleter, TokensWithLogprobs

from evsys.model.local.client import LocalModelClient
from evsys.model.tinker_client import local_sampling_params


class LocalTokenCompleter(TokenCompleter):
    """Samples one completion per call on the local engine (`seed`: call n samples with seed + n)."""

    def __init__(
        self,
        client: LocalModelClient,
        *,
        max_tokens: int,
        temperature: float = 1.0,
        seed: int | None = None,
    ) -> None:
        self.client = client
        self.max_tokens = max_tokens
        self.temperature = temperature
        self._seeds = itertools.count(seed) if seed is not None else None

    async def __call__(
        self, model_input: tinker.ModelInput, stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        """Sample from `model_input`'s tokens until `stop`, the end-of-sequence or the token budget."""
        budget = min(self.max_tokens, max_tokens) if max_tokens is not None else self.max_tokens
        engine = await self.client.engine()
        wanted = tinker.SamplingParams(
            max_tokens=budget,
            stop=stop,
            temperature=self.temperature,
            seed=next(self._seeds) if self._seeds is not None else None,
        )
        result = await self.client.shared.generate(
            model_input.to_ints(), local_sampling_params(wanted, engine.decode)
        )
        return TokensWithLogprobs(
            tokens=result.completion_ids, maybe_logprobs=result.logprobs, stop_reason=result.finish_reason
        )
