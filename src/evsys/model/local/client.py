"""`LocalModelClient`: the async `ModelClient` over the in-process engine.

Model weights load once per process and model directory (many trials share one engine). Generation goes
through a continuous-batching scheduler (concurrent requests share each forward pass); loading, rendering and
scoring run in one worker thread. Nothing blocks the event loop. At interpreter exit every shared engine is
closed: generation stops between two steps and its thread is joined, so the process exits cleanly even when
trials were cut off mid-generation.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from evsys.model.base import Completion, FinishReason, Message, SamplingParams, ToolSchema
from evsys.model.local.batching import BatchingScheduler
from evsys.model.local.constrain import OutputConstraint, reads_tool_calls
from evsys.model.local.engine import GenerationResult, LocalEngine, TokenCallback
from evsys.model.local.loader import resolve_model_dir
from evsys.model.local.policy import LocalPolicy
from evsys.model.partial import current_partial
from evsys.model.render import Renderer
from evsys.model.waiting import model_wait
from evsys.records import Usage

_SHARED: dict[str, SharedEngine] = {}
_SHARED_LOCK = threading.Lock()


class SharedEngine:
    """One loaded engine, a worker thread for loading/rendering/scoring, and the batching scheduler."""

    def __init__(self, model: str, name: str, max_batch_size: int = 32) -> None:
        self.model = model
        self.name = name
        self.max_batch_size = max_batch_size
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="evsys-local-engine")
        self._engine: LocalEngine | None = None
        self.scheduler: BatchingScheduler | None = None

    def _load(self) -> LocalEngine:
        if self._engine is None:
            engine = LocalEngine.load(resolve_model_dir(self.model), name=self.name)
            self.scheduler = BatchingScheduler(engine, self.max_batch_size)
            self._engine = engine
        return self._engine

    async def generate(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        on_token: TokenCallback | None = None,
        cancel: threading.Event | None = None,
        constraint: OutputConstraint | None = None,
    ) -> GenerationResult:
        """Generate through the batching scheduler (concurrent requests share forward passes), sampling only
        what `constraint` allows. Loading the model and waiting in the queue before the prefill count as a
        model wait (`evsys.model.waiting`)."""
        loop = asyncio.get_running_loop()
        end_wait = model_wait()
        try:
            tokens = await self.run(lambda engine: constraint.start(engine) if constraint else None)
            assert self.scheduler is not None
            future = self.scheduler.submit(
                prompt_ids,
                params,
                on_token,
                cancel,
                on_admit=lambda: _call_soon(loop, end_wait),
                constraint=tokens,
            )
            return await asyncio.wrap_future(future)
        finally:
            end_wait()

    def close(self) -> None:
        """Stop generating (unfinished requests fail) and wait for the scheduler's thread."""
        if self.scheduler is not None:
            self.scheduler.close()

    async def load_weights(self, state_dict: Mapping[str, Any], version: int | None = None) -> int:
        """Copy `state_dict` into the running model between generations; returns the new weights version
        (`version` when given, e.g. the trainer's step, else the old one + 1).

        The batching scheduler drains its running batch, applies the weights in its own thread and only then
        admits new requests; the worker thread waits meanwhile, so no rendering or scoring overlaps either."""

        def swap(engine: LocalEngine) -> int:
            assert self.scheduler is not None, "the engine is loaded before its weights are replaced"
            update = self.scheduler.between_generations(lambda e: e.replace_weights(state_dict, version))
            return int(update.result())

        return int(await self.run(swap))

    def decode(self, ids: list[int]) -> str:
        """`ids` as text (the engine is loaded: a prompt was rendered); quick enough for the event loop."""
        return self._load().renderer.decode(ids)

    async def run(self, fn: Callable[[LocalEngine], Any]) -> Any:
        """Run `fn(engine)` in the worker thread (loading the model first if needed)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, lambda: fn(self._load()))


def shared_engine(model: str, name: str | None = None, max_batch_size: int = 32) -> SharedEngine:
    """The process-wide engine for a model path ('' = the default model); the first caller's settings win."""
    key = str(Path(model).expanduser().resolve()) if model else ""
    with _SHARED_LOCK:
        if key not in _SHARED:
            _SHARED[key] = SharedEngine(
                model, name or (f"local:{model}" if model else "local"), max_batch_size
            )
        return _SHARED[key]


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[[], None]) -> None:
    """Schedule `fn` on `loop` from another thread; nothing if the loop is already closed."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(fn)


@atexit.register
def close_shared_engines() -> None:
    """Close every shared engine (runs at interpreter exit, before daemon threads are torn down)."""
    with _SHARED_LOCK:
        engines = list(_SHARED.values())
    for engine in engines:
        engine.close()


class LocalModelClient:
    """ModelClient over the in-process transformers engine (`local`, `local:/path/to/hf-dir`)."""

    def __init__(self, model: str = "", *, name: str | None = None, max_batch_size: int = 32) -> None:
        self.shared = shared_engine(model, name, max_batch_size)
        self.model = self.shared.name

    async def engine(self) -> LocalEngine:
        """The loaded engine (loads the model on first use, in the worker thread)."""
        return await self.shared.run(lambda engine: engine)

    async def policy(self) -> LocalPolicy:
        """The running engine as a trainable policy: its torch model, tokenizer and weights version, and a way
        to load new weights between rollout batches (loads the model on first use)."""
        return LocalPolicy(self.shared, await self.engine())

    async def load_weights(self, state_dict: Mapping[str, Any], version: int | None = None) -> int:
        """Load new weights into the running engine between generations; returns the new weights version
        (`version` when given, e.g. the trainer's step: every sample records it; else the old one + 1)."""
        await self.engine()
        return await self.shared.load_weights(state_dict, version)

    async def weights_version(self) -> int:
        """The version of the weights new generations are sampled with (loads the model on first use)."""
        return (await self.engine()).weights_version

    async def complete(
        self,
        messages: list[Message],
        *,
        tools: list[ToolSchema] | None = None,
        params: SamplingParams | None = None,
        constraint: OutputConstraint | None = None,
    ) -> Completion:
        """Render the chat, generate (only what `constraint` allows, when given), and parse Hermes tool calls
        from the completion (not from JSON content a constraint asked for)."""
        params = params or SamplingParams()
        started = time.perf_counter()

        prompt_ids = await self.shared.run(lambda engine: engine.renderer.render(messages, tools))
        partial = current_partial()
        on_token = None
        if partial is not None:  # the caller keeps what was sampled should the call be cut off
            partial.prompt_token_ids = list(prompt_ids)
            partial.decode = self.shared.decode
            on_token = partial.add
        result = await self.shared.generate(prompt_ids, params, on_token, constraint=constraint)
        elapsed = time.perf_counter() - started
        calls = reads_tool_calls(constraint)
        return await self.shared.run(
            lambda engine: build_completion(
                self.model, engine.renderer, prompt_ids, result, params, elapsed, tool_calls=calls
            )
        )

    async def complete_ids(self, prompt_ids: list[int], params: SamplingParams | None = None) -> Completion:
        """Generate from raw prompt token ids (no template, no tool parsing)."""
        params = params or SamplingParams()
        started = time.perf_counter()
        result = await self.shared.generate(list(prompt_ids), params)
        elapsed = time.perf_counter() - started
        return await self.shared.run(
            lambda engine: build_completion(
                self.model, engine.renderer, prompt_ids, result, params, elapsed, tool_calls=False
            )
        )

    async def stream(
        self, prompt_ids: list[int], params: SamplingParams, constraint: OutputConstraint | None = None
    ) -> AsyncIterator[tuple[int, float] | GenerationResult]:
        """Yield (token id, logprob) as each token is sampled, then the final GenerationResult."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        cancel = threading.Event()

        def on_token(token: int, logprob: float) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, (token, logprob))

        task = asyncio.ensure_future(self.shared.generate(prompt_ids, params, on_token, cancel, constraint))
        task.add_done_callback(lambda _: loop.call_soon_threadsafe(queue.put_nowait, None))
        try:
            while (item := await queue.get()) is not None:
                yield item
            yield await task
        finally:
            cancel.set()

    async def aclose(self) -> None:
        """Nothing to release per client: the shared engine lives for the process."""


def build_completion(
    model: str,
    renderer: Renderer,
    prompt_ids: list[int],
    result: GenerationResult,
    params: SamplingParams,
    latency: float,
    *,
    tool_calls: bool = True,
) -> Completion:
    """Assemble a Completion from a generation: the renderer reads the text (and, unless `tool_calls` is
    False, the tool calls) out of the ids."""
    parsed = renderer.parse(result.completion_ids, params.stop)
    calls = parsed.tool_calls if tool_calls else []
    finish: FinishReason = result.finish_reason
    if calls and finish == "stop":
        finish = "tool_calls"
    return Completion(
        text=parsed.text if tool_calls else parsed.visible_text,
        raw_text=parsed.raw_text,
        tool_calls=calls,
        finish_reason=finish,
        prompt_token_ids=list(prompt_ids),
        completion_token_ids=result.completion_ids,
        logprobs=result.logprobs if params.logprobs else None,
        top_logprobs=result.top_logprobs,
        usage=Usage(prompt_tokens=len(prompt_ids), completion_tokens=len(result.completion_ids)),
        cost_usd=0.0,
        weights_version=result.weights_version,
        model=model,
        latency_s=latency,
    )
