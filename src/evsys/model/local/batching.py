"""Continuous batching for the local engine: one forward pass per step for every active generation.

Each new request is prefilled on its own, then joins the running batch: the KV caches are left-padded to a
common length and stacked, an attention mask hides the padding and explicit position ids keep each sequence's
positions its own. Every decode step feeds the last token of all active sequences in one forward pass, samples
each row with its own parameters and generator, and drops finished rows. Logprobs stay the raw-distribution
log-softmax of each row's logits, so teacher forcing reproduces them (differences are float rounding, ~1e-6).
A row with an output constraint (`evsys.model.local.constrain`) samples from its logits with every token the
constraint does not allow masked out; its logprobs are still the raw ones.

All model calls happen in the scheduler's own thread; callers get a concurrent.futures.Future. A weight
update (`between_generations`) runs in that thread too, once the running batch has drained: requests that
arrive meanwhile wait for it, so every generation is sampled by one weights version from its first token to
its last, and records that version.

All model calls happen in the scheduler's own thread; callers get a concurrent.futures.Future. A request
whose future is cancelled (or whose cancel event is set) stops at the next step, and is never prefilled if it
is still queued. `close()` stops the thread between two steps and fails what is left; the client calls it at
interpreter exit, so no forward pass is still running in a thread the interpreter tears down.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Literal

from evsys.model.base import SamplingParams
from evsys.model.errors import ModelError
from evsys.model.local.constrain import TokenConstraint
from evsys.model.local.engine import (
    GenerationResult,
    LocalEngine,
    TokenCallback,
    make_generator,
    prefill,
    sample,
)
from evsys.model.render import find_stop


@dataclass
class _Sequence:
    """One generation in flight."""

    prompt_ids: list[int]
    params: SamplingParams
    limit: int
    on_token: TokenCallback | None
    cancel: threading.Event | None
    future: Future
    on_admit: Callable[[], Any] | None = None
    constraint: TokenConstraint | None = None
    generator: Any = None
    version: int = 0
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top: list[list[tuple[int, float]]] = field(default_factory=list)
    finish: Literal["stop", "length"] | None = None


class BatchingScheduler:
    """Runs up to `max_batch_size` generations at once in one worker thread."""

    def __init__(self, engine: LocalEngine, max_batch_size: int = 32) -> None:
        self.engine = engine
        self.max_batch_size = max(1, max_batch_size)
        self._pending: deque[_Sequence] = deque()
        self._updates: deque[tuple[Callable[[LocalEngine], Any], Future]] = deque()
        self._wakeup = threading.Condition()
        self._active: list[_Sequence] = []
        self._cache: Any = None
        self._mask: Any = None
        self._batchable = True
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="evsys-local-batcher", daemon=True)
        self._thread.start()
        self.steps = 0
        self.max_batch_seen = 0

    def submit(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        on_token: TokenCallback | None = None,
        cancel: threading.Event | None = None,
        on_admit: Callable[[], Any] | None = None,
        constraint: TokenConstraint | None = None,
    ) -> Future:
        """Queue a generation; raises ContextOverflowError at once if it cannot fit. `on_admit` is called
        (in the scheduler's thread) when the request leaves the queue and its prefill starts; `constraint`
        restricts which tokens may be sampled."""
        limit = self.engine.budget(len(prompt_ids), params.max_tokens)
        seq = _Sequence(list(prompt_ids), params, limit, on_token, cancel, Future(), on_admit, constraint)
        seq.generator = make_generator(params.seed)
        with self._wakeup:
            if self._closed:
                raise EngineClosedError("the local engine is shut down")
            self._pending.append(seq)
            self._wakeup.notify()
        return seq.future

    def between_generations(self, update: Callable[[LocalEngine], Any]) -> Future:
        """Run `update(engine)` in the scheduler's thread as soon as no generation is in flight.

        The running batch finishes first and no new request is admitted until the update is done; the
        future holds its return value (or its exception)."""
        future: Future = Future()
        with self._wakeup:
            if self._closed:
                future.set_exception(EngineClosedError("the local engine is shut down"))
                return future
            self._updates.append((update, future))
            self._wakeup.notify()
        return future

    def close(self, timeout: float | None = None) -> None:
        """Stop the worker between two steps, fail every unfinished request, and wait for the thread."""
        with self._wakeup:
            self._closed = True
            self._wakeup.notify()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _loop(self) -> None:
        while True:
            with self._wakeup:
                while not self._pending and not self._active and not self._updates and not self._closed:
                    self._wakeup.wait()
                if self._closed:
                    break
                update = self._updates.popleft() if self._updates and not self._active else None
                room = self.max_batch_size if self._batchable else 1
                if self._updates or update is not None:
                    room = 0  # drain the batch; new requests wait for the update
                admitted = _take_live(self._pending, room - len(self._active))
            if update is not None:
                self._apply(*update)
                continue
            try:
                for seq in admitted:
                    self._admit(seq)
                if self._active:
                    self._step()
            except BaseException as exc:  # a failed forward fails every request in it, not the thread
                for seq in [*admitted, *self._active]:
                    if not seq.future.done():
                        seq.future.set_exception(exc)
                self._active, self._cache, self._mask = [], None, None
        self._fail_unfinished()

    def _fail_unfinished(self) -> None:
        with self._wakeup:
            left = [*self._pending, *self._active]
            self._pending.clear()
            updates = list(self._updates)
            self._updates.clear()
        for _, future in updates:
            if not future.done():
                future.set_exception(
                    EngineClosedError("the local engine shut down before the weights update")
                )
        self._active, self._cache, self._mask = [], None, None
        for seq in left:
            if not seq.future.done():
                seq.future.set_exception(EngineClosedError("the local engine shut down mid-generation"))

    def _apply(self, update: Callable[[LocalEngine], Any], future: Future) -> None:
        try:
            future.set_result(update(self.engine))
        except BaseException as exc:  # reported to the caller; the scheduler keeps serving
            future.set_exception(exc)

    def _admit(self, seq: _Sequence) -> None:
        """Prefill one request, sample its first token, and add it to the batch unless it is already done."""
        import torch

        seq.version = self.engine.weights_version
        if seq.on_admit is not None:
            seq.on_admit()
        with torch.inference_mode():
            out = prefill(self.engine.model, seq.prompt_ids)
        self._record(seq, out.logits[0, -1])
        if seq.finish is not None:
            self._resolve(seq)
            return
        self._join(seq, out.past_key_values)

    def _join(self, seq: _Sequence, cache: Any) -> None:
        import torch
        from transformers import DynamicCache
        from transformers.cache_utils import DynamicLayer

        length = len(seq.prompt_ids)
        if not self._active:
            self._batchable = all(type(layer) is DynamicLayer for layer in cache.layers)
            self._active, self._cache = [seq], cache
            self._mask = torch.ones((1, length), dtype=torch.long)
            return
        width = max(self._mask.shape[1], length)
        layers = []
        for old, new in zip(self._cache.layers, cache.layers, strict=True):
            keys = torch.cat([_left_pad(old.keys, width), _left_pad(new.keys, width)])
            values = torch.cat([_left_pad(old.values, width), _left_pad(new.values, width)])
            layers.append((keys, values))
        self._cache = DynamicCache(ddp_cache_data=layers)
        new_mask = torch.ones((1, length), dtype=torch.long)
        self._mask = torch.cat([_left_pad(self._mask, width), _left_pad(new_mask, width)])
        self._active.append(seq)

    def _step(self) -> None:
        """One decode step for every active sequence."""
        import torch

        active = self._active
        self.steps += 1
        self.max_batch_seen = max(self.max_batch_seen, len(active))
        tokens = torch.tensor([[s.ids[-1]] for s in active])
        positions = torch.tensor([[len(s.prompt_ids) + len(s.ids) - 1] for s in active])
        self._mask = torch.cat([self._mask, torch.ones((len(active), 1), dtype=torch.long)], dim=1)
        with torch.inference_mode():
            out = self.engine.model(
                input_ids=tokens,
                attention_mask=self._mask,
                position_ids=positions,
                past_key_values=self._cache,
                use_cache=True,
            )
        self._cache = out.past_key_values
        for row, seq in enumerate(active):
            self._record(seq, out.logits[row, -1])
        keep = [row for row, seq in enumerate(active) if seq.finish is None]
        for seq in active:
            if seq.finish is not None:
                self._resolve(seq)
        if len(keep) < len(active):
            self._shrink(keep)

    def _shrink(self, keep: list[int]) -> None:
        import torch

        self._active = [self._active[row] for row in keep]
        if not keep:
            self._cache, self._mask = None, None
            return
        index = torch.tensor(keep)
        self._cache.batch_select_indices(index)
        self._mask = self._mask.index_select(0, index)
        used = int(self._mask.any(dim=0).nonzero()[0])  # drop columns that are padding in every row
        if used:
            self._mask = self._mask[:, used:]
            for layer in self._cache.layers:
                layer.keys, layer.values = layer.keys[:, :, used:], layer.values[:, :, used:]

    def _record(self, seq: _Sequence, logits: Any) -> None:
        """Sample the next token of `seq` from `logits` and decide whether it is finished."""
        import torch

        step_logprobs = torch.log_softmax(logits.float(), dim=-1)
        allowed = step_logprobs if seq.constraint is None else seq.constraint.mask(step_logprobs, seq.ids)
        token = sample(allowed, seq.params, seq.generator)
        seq.ids.append(token)
        seq.logprobs.append(float(step_logprobs[token]))
        if seq.params.top_logprobs:
            best = torch.topk(step_logprobs, min(seq.params.top_logprobs, step_logprobs.numel()))
            seq.top.append([(int(i), float(v)) for v, i in zip(best.values, best.indices, strict=True)])
        if seq.on_token is not None:
            seq.on_token(token, seq.logprobs[-1])
        if token in self.engine.eos_ids and not seq.params.ignore_eos:
            seq.finish = "stop"
        elif seq.params.stop and find_stop(self.engine.decode(seq.ids), seq.params.stop) is not None:
            seq.finish = "stop"
        elif len(seq.ids) >= seq.limit or _is_dropped(seq):
            seq.finish = "length"

    def _resolve(self, seq: _Sequence) -> None:
        assert seq.finish is not None, "only finished sequences are resolved"
        result = GenerationResult(
            seq.ids, seq.logprobs, seq.finish, seq.version, seq.top if seq.params.top_logprobs else None
        )
        if not seq.future.done():
            seq.future.set_result(result)


class EngineClosedError(ModelError):
    """A generation was asked of, or cut short by, a scheduler that is shut down (HTTP 503 when served)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, status_code=503)


def _is_dropped(seq: _Sequence) -> bool:
    return seq.future.cancelled() or (seq.cancel is not None and seq.cancel.is_set())


def _take_live(pending: deque[_Sequence], room: int) -> list[_Sequence]:
    """Pop up to `room` queued requests, dropping those cancelled while they waited (never prefilled)."""
    taken: list[_Sequence] = []
    while pending and len(taken) < room:
        seq = pending.popleft()
        if _is_dropped(seq):
            if not seq.future.done():
                seq.future.cancel()
            continue
        taken.append(seq)
    return taken


def _left_pad(tensor: Any, width: int) -> Any:
    """Pad dim -2 (KV: [B, H, L, D]) or dim 1 (mask: [B, L]) on the left with zeros up to `width`."""
    import torch

    dim = 1 if tensor.dim() == 2 else -2
    missing = width - tensor.shape[dim]
    if missing <= 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = missing
    return torch.cat([torch.zeros(shape, dtype=tensor.dtype), tensor], dim=dim)
