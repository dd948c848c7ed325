"""Rubrics: composable reward functions with the semantics of OpenEnv's RFC 004.

A `Rubric` scores an `action` (in evsys: the agent's final text, the completion) given an `observation` (in
evsys: a `RubricObservation` holding the task data, the prompt, and the rewards computed before the rubric
ran, e.g. the test script's `reward.json` for a task directory). `forward` is sync or async;
`await rubric(action, observation)` runs either, checks the score is a finite number and stores it in
`last_score`. Rubrics assigned as attributes are registered as named children, like `nn.Module` submodules
(`children()`, `named_rubrics()`).

Composites: `WeightedSum` (children evaluated concurrently), `Gate` (the child's score if it reaches a
threshold, else 0) and `Sequential` (fail fast: the first 0 stops the chain). `RubricVerifier` makes any
rubric a verifier function (see `evsys.verify.functions`), reporting the total as `reward` and every named
child's score as its own key.

`last_score` is the score of the most recent call from any caller. For concurrent trials sharing one rubric,
`RubricVerifier` records each call's component scores and judge warnings separately (per-call context), so
concurrent trials never see each other's scores.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from evsys.verify.base import VerifierResult, finite_number


@dataclass
class CallRecord:
    """What one top-level rubric call produced: the score of every rubric evaluated, and any warnings."""

    scores: dict[int, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    extra: dict[int, dict[str, float]] = field(default_factory=dict)  # a rubric's own keys (its turns)


_CURRENT_CALL: contextvars.ContextVar[CallRecord | None] = contextvars.ContextVar(
    "evsys_rubric_call", default=None
)


def record_warning(message: str) -> None:
    """Attach a warning to the rubric call in progress (no-op outside a `RubricVerifier` call)."""
    record = _CURRENT_CALL.get()
    if record is not None:
        record.warnings.append(message)


def record_scores(rubric: Rubric, scores: Mapping[str, float]) -> None:
    """Report more reward keys of `rubric` for the call in progress (e.g. a trajectory rubric's per-turn
    scores): `RubricVerifier` adds them, under the rubric's dotted name for a child (no-op outside one)."""
    record = _CURRENT_CALL.get()
    if record is not None:
        record.extra[id(rubric)] = dict(scores)


class RubricObservation(BaseModel):
    """What a rubric sees besides the action: task data, the prompt, earlier rewards, the trial's records."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    data: dict[str, Any] = Field(default_factory=dict, description="The task's data fields (e.g. `answer`).")
    prompt: str | None = None
    rewards: dict[str, float] = Field(
        default_factory=dict,
        description="Rewards computed before the rubric, e.g. the test script's reward.json.",
    )
    task: Any = None
    trajectory: Any = None


class Rubric:
    """Base class: override `forward(action, observation)` (sync or async); call it as `await rubric(a, o)`.

    Set the class attribute `blocking = True` on a sync rubric that does I/O or heavy work: its `forward` then
    runs in a worker thread so it never stalls the event loop (and runs concurrently inside a `WeightedSum`).
    """

    blocking: bool = False

    def __init__(self) -> None:
        object.__setattr__(self, "_children", {})
        self.last_score: float | None = None

    def __setattr__(self, name: str, value: Any) -> None:
        children = self.__dict__.setdefault("_children", {})
        if isinstance(value, Rubric):
            children[name] = value
        else:
            children.pop(name, None)
        object.__setattr__(self, name, value)

    def forward(self, action: Any, observation: Any) -> Any:
        """Score `action` given `observation`; return a float, or a coroutine resolving to one."""
        raise NotImplementedError(f"{type(self).__name__} must implement forward(action, observation)")

    async def __call__(self, action: Any, observation: Any = None) -> float:
        """Run `forward` (awaiting it when async), validate the score, store it in `last_score`, return it."""
        if self.blocking and not inspect.iscoroutinefunction(self.forward):
            result = await asyncio.to_thread(self.forward, action, observation)
        else:
            result = self.forward(action, observation)
        if inspect.isawaitable(result):
            result = await result
        score = _check_score(result, self)
        self.last_score = score
        record = _CURRENT_CALL.get()
        if record is not None:
            record.scores[id(self)] = score
        return score

    def add_rubric(self, name: str, rubric: Rubric) -> None:
        """Register `rubric` as a child called `name` (same as assigning it as an attribute)."""
        if not isinstance(rubric, Rubric):
            raise TypeError(f"{name!r} must be a Rubric, got {type(rubric).__name__}")
        taken = hasattr(type(self), name) or (
            name in self.__dict__ and name not in self.__dict__.get("_children", {})
        )
        if taken or name.startswith("_"):
            raise ValueError(f"{type(self).__name__} cannot name a child {name!r}: the name is taken")
        setattr(self, name, rubric)

    def named_children(self) -> Iterator[tuple[str, Rubric]]:
        """The direct children with their attribute names, in registration order."""
        yield from self.__dict__.get("_children", {}).items()

    def children(self) -> Iterator[Rubric]:
        """The direct children, in registration order."""
        for _, child in self.named_children():
            yield child

    def named_rubrics(self, prefix: str = "") -> Iterator[tuple[str, Rubric]]:
        """Every descendant with its dotted path (e.g. `gate.0`), depth first, excluding the rubric itself."""
        for name, child in self.named_children():
            path = f"{prefix}.{name}" if prefix else name
            yield path, child
            yield from child.named_rubrics(path)

    def reset(self) -> None:
        """Clear `last_score` here and in every descendant."""
        self.last_score = None
        for _, child in self.named_rubrics():
            child.last_score = None

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={c!r}" for n, c in self.named_children())
        return f"{type(self).__name__}({inner})"


def _check_score(value: Any, rubric: Rubric) -> float:
    return finite_number(value, f"{type(rubric).__name__}.forward returned")


def _named(rubrics: Sequence[Rubric] | Mapping[str, Rubric]) -> list[tuple[str, Rubric]]:
    items = (
        list(rubrics.items())
        if isinstance(rubrics, Mapping)
        else [(str(i), r) for i, r in enumerate(rubrics)]
    )
    for name, rubric in items:
        if not isinstance(rubric, Rubric):
            raise TypeError(f"child {name!r} must be a Rubric, got {type(rubric).__name__}")
        if not name.isidentifier() and not name.isdigit():
            raise ValueError(f"child name {name!r} must be an identifier")
    return items


class WeightedSum(Rubric):
    """The weighted sum of its children's scores; the children are evaluated concurrently.

    `rubrics` is a list (children named "0", "1", ...) or a mapping of names to rubrics. `weights` (default:
    equal) must be finite, non-negative, one per child, and sum to 1.
    """

    def __init__(
        self, rubrics: Sequence[Rubric] | Mapping[str, Rubric], weights: Sequence[float] | None = None
    ) -> None:
        super().__init__()
        items = _named(rubrics)
        if not items:
            raise ValueError("WeightedSum needs at least one rubric")
        weights = [1.0 / len(items)] * len(items) if weights is None else [float(w) for w in weights]
        _check_weights(weights, len(items))
        self.weights = weights
        self._order = [name for name, _ in items]
        for name, rubric in items:
            self.add_rubric(name, rubric)

    async def forward(self, action: Any, observation: Any) -> float:
        """Evaluate every child at once (asyncio.gather) and return the weighted sum of their scores."""
        children = [getattr(self, name) for name in self._order]
        scores: list[float] = await asyncio.gather(*(child(action, observation) for child in children))
        return sum(w * s for w, s in zip(self.weights, scores, strict=True))


def _check_weights(weights: list[float], count: int) -> None:
    if len(weights) != count:
        raise ValueError(
            f"WeightedSum got {len(weights)} weights for {count} rubrics; give one weight per rubric"
        )
    for i, weight in enumerate(weights):
        if not math.isfinite(weight) or weight < 0:
            raise ValueError(f"WeightedSum weight {i} is {weight}; weights must be finite and >= 0")
    total = sum(weights)
    if abs(total - 1.0) > 1e-6:
        raise ValueError(
            f"WeightedSum weights sum to {total:g}, expected 1 (divide each weight by {total:g})"
        )


class Gate(Rubric):
    """Passes its child's score through when it is >= `threshold`, else scores 0."""

    rubric: Rubric  # the child, registered by add_rubric

    def __init__(self, rubric: Rubric, threshold: float = 1.0) -> None:
        super().__init__()
        if not math.isfinite(float(threshold)):
            raise ValueError(f"Gate threshold must be finite, got {threshold}")
        self.threshold = float(threshold)
        self.add_rubric("rubric", rubric)

    async def forward(self, action: Any, observation: Any) -> float:
        """The child's score if it reaches the threshold, else 0."""
        score = await self.rubric(action, observation)
        return score if score >= self.threshold else 0.0


class Sequential(Rubric):
    """Runs its children in order and fails fast: the first child scoring 0 stops the chain with 0.

    When no child scores 0 the last child's score is returned. Children after a 0 are not evaluated.
    """

    def __init__(self, *rubrics: Rubric) -> None:
        super().__init__()
        if not rubrics:
            raise ValueError("Sequential needs at least one rubric")
        self._order = [name for name, _ in _named(list(rubrics))]
        for name, rubric in zip(self._order, rubrics, strict=True):
            self.add_rubric(name, rubric)

    async def forward(self, action: Any, observation: Any) -> float:
        """Each child in turn; 0 as soon as one scores 0, else the last score."""
        score = 0.0
        for name in self._order:
            score = await getattr(self, name)(action, observation)
            if score == 0:
                return 0.0
        return score


class RubricVerifier:
    """A rubric as a verifier function: register it with `register_verifier(name, RubricVerifier(rubric))`.

    Called as `await rv(completion, rewards=..., task=..., trajectory=..., prompt=..., **data)`, it builds a
    `RubricObservation`, scores the completion and returns a `VerifierResult` whose rewards are
    `{key: total}` plus one entry per named descendant that was evaluated in this call (its dotted name), and
    whose warnings are those recorded during this call (e.g. a judge reply without a score). For a task
    directory the engine passes the test script's rewards as `rewards=`; a child such as `RewardKey("reward")`
    reads them.
    """

    def __init__(self, rubric: Rubric, *, key: str = "reward", components: bool = True) -> None:
        if not isinstance(rubric, Rubric):
            raise TypeError(f"RubricVerifier needs a Rubric, got {type(rubric).__name__}")
        names = [name for name, _ in rubric.named_rubrics()]
        if components and key in names:
            raise ValueError(f"a child rubric is named {key!r}, which is also the total's reward key")
        self.rubric = rubric
        self.key = key
        self.components = components

    async def __call__(
        self,
        completion: str,
        *,
        rewards: Mapping[str, float] | None = None,
        task: Any = None,
        trajectory: Any = None,
        prompt: str | None = None,
        **data: Any,
    ) -> VerifierResult:
        """Score `completion`; the per-call component scores and warnings go into the outcome."""
        observation = RubricObservation(
            data=data, prompt=prompt, rewards=dict(rewards or {}), task=task, trajectory=trajectory
        )
        record = CallRecord()
        token = _CURRENT_CALL.set(record)
        try:
            total = await self.rubric(completion, observation)
        finally:
            _CURRENT_CALL.reset(token)
        scores = {self.key: total, **record.extra.get(id(self.rubric), {})}
        if self.components:
            for name, child in self.rubric.named_rubrics():
                if id(child) in record.scores:
                    scores[name] = record.scores[id(child)]
                scores.update({f"{name}.{k}": v for k, v in record.extra.get(id(child), {}).items()})
        return VerifierResult(rewards=scores, warnings=record.warnings)


class RewardKey(Rubric):
    """Reads a reward computed before the rubric (e.g. the test script's `reward`) from the observation.

    A missing key scores `default` (0 unless given) so a gate on it fails closed.
    """

    def __init__(self, key: str = "reward", default: float = 0.0) -> None:
        super().__init__()
        self.key = key
        self.default = float(default)

    def forward(self, action: Any, observation: Any) -> float:
        """`observation.rewards[key]` (a mapping observation is read directly), else the default."""
        rewards = getattr(observation, "rewards", None)
        if rewards is None and isinstance(observation, Mapping):
            rewards = observation.get("rewards", observation)
        return float((rewards or {}).get(self.key, self.default))
