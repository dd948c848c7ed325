"""`LLMJudge`: a rubric that asks a model to grade the action and parses a score out of its reply.

The prompt template is formatted with `str.format` fields: `{action}` (also `{completion}`), `{observation}`,
`{prompt}`, `{rewards}` and every task data field (e.g. `{answer}`); for a mapping observation, its keys.
Literal braces in the template are written `{{` and `}}`. The reply is searched with `score_pattern` and the
LAST match wins (judges usually reason first and conclude with the score); the pattern's first group is the
number, or the whole match when it has no group.

A reply without a parseable score gives `default_score` and a warning: kept in `last_warning`, appended to
`warnings`, and attached to the current `RubricVerifier` call so it lands in the trial's verifier outcome. A
failing model call raises (the verifier records it as the trial's verifier error): an unreachable judge is an
infrastructure fault, not a score.

Every call is bounded by `timeout_s` (default `JUDGE_TIMEOUT_SEC`: the request and any retries of the client
together; the request is cancelled then): a judge that does not answer in time raises `JudgeTimeoutError`,
which makes that sample `verifier_timeout` (the message names the judge's model and the limit) while the
other samples score.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

from evsys.model.base import Completion, Message, ModelClient, SamplingParams
from evsys.verify.base import VerifierTimeoutError
from evsys.verify.judge_log import JUDGE_LOG, JudgeCall, JudgeLog, current_judge_log
from evsys.verify.rubric import Rubric, RubricObservation, record_warning

DEFAULT_SCORE_PATTERN = r"(?i)score\s*[:=]?\s*\**\s*(-?\d+(?:\.\d+)?)"
"""Matches e.g. `Score: 7`, `score = 0.5`, `**Score:** 9`."""

MAX_KEPT_WARNINGS = 1000
CANCELLED = "cancelled: the verifier's time limit passed or the trial was cancelled"
JUDGE_TIMEOUT_SEC = 60.0
"""How long one judge call (its request and any retries) may take by default."""


class JudgeTimeoutError(VerifierTimeoutError):
    """The judge's model did not answer within the judge's `timeout_s`."""


class LLMJudge(Rubric):
    """Scores an action by asking a model (any `ModelClient`, or a model string such as `"local"`).

    `normalize=True` maps `score_range` (default 0-10) linearly onto 0-1, clamping (with a warning) scores
    outside it; `False` keeps the raw number; a callable maps the raw number itself. `default_score` is the
    final score used when the reply holds none (it is not normalized).
    """

    def __init__(
        self,
        prompt_template: str,
        model: ModelClient | str,
        *,
        score_pattern: str = DEFAULT_SCORE_PATTERN,
        default_score: float = 0.0,
        normalize: bool | Callable[[float], float] = True,
        score_range: tuple[float, float] = (0.0, 10.0),
        system_prompt: str | None = None,
        params: SamplingParams | None = None,
        timeout_s: float = JUDGE_TIMEOUT_SEC,
    ) -> None:
        super().__init__()
        if not (math.isfinite(timeout_s) and timeout_s > 0):
            raise ValueError(f"LLMJudge timeout_s must be a positive number, got {timeout_s}")
        if not isinstance(prompt_template, str) or not prompt_template.strip():
            raise ValueError("LLMJudge prompt_template must be a non-empty string")
        low, high = (float(x) for x in score_range)
        if not (math.isfinite(low) and math.isfinite(high) and high > low):
            raise ValueError(f"LLMJudge score_range must be two finite numbers, low < high: {score_range}")
        if not math.isfinite(float(default_score)):
            raise ValueError(f"LLMJudge default_score must be finite, got {default_score}")
        self.prompt_template = prompt_template
        self.score_regex = re.compile(score_pattern)
        self.default_score = float(default_score)
        self.normalize = normalize
        self.score_range = (low, high)
        self.system_prompt = system_prompt
        self.params = params or SamplingParams(temperature=0.0, max_tokens=256)
        self.timeout_s = float(timeout_s)
        self._model_spec = model if isinstance(model, str) else None
        self._client: ModelClient | None = None if isinstance(model, str) else model
        self.last_reply: str | None = None
        self.last_warning: str | None = None
        self.warnings: list[str] = []

    @property
    def client(self) -> ModelClient:
        """The model client; a model string is turned into a client on first use."""
        if self._client is None:
            from evsys.model.spec import create_model_client

            self._client = create_model_client(self._model_spec or "")
        return self._client

    async def aclose(self) -> None:
        """Close the client when the judge created it from a model string."""
        if self._model_spec is not None and self._client is not None:
            await self._client.aclose()
            self._client = None

    def render(self, action: Any, observation: Any) -> str:
        """The prompt for this action and observation; a field the template names but lacks is a
        ValueError."""
        fields = _template_fields(action, observation)
        try:
            return self.prompt_template.format_map(fields)
        except KeyError as exc:
            available = ", ".join(sorted(fields))
            raise ValueError(
                f"LLMJudge prompt template refers to {{{exc.args[0]}}}, which is not available; "
                f"available fields: {available}"
            ) from None
        except (IndexError, ValueError) as exc:
            raise ValueError(
                f"LLMJudge prompt template is malformed ({exc}); write braces as {{{{ }}}}"
            ) from None

    async def forward(self, action: Any, observation: Any) -> float:
        """Ask the model, parse the score from its reply, normalize it; the call is recorded in the trial's
        `verifier/judge.jsonl` (evsys.verify.judge_log) when the engine is recording."""
        messages: list[Message] = [{"role": "user", "content": self.render(action, observation)}]
        if self.system_prompt:
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        call = JudgeCall(model=self._model_name(), messages=[dict(m) for m in messages])
        started = time.perf_counter()
        try:
            completion = await self._ask(messages)
        except asyncio.CancelledError:
            _record_now(call, started, CANCELLED)
            raise
        except Exception as exc:
            await _record(call, started, f"{type(exc).__name__}: {exc}")
            raise
        self.last_reply = completion.text
        self.last_warning = None
        score, call.raw_score, call.warning = self._score_of(completion.text)
        call.reply, call.score = completion.text, score
        await _record(call, started)
        return score

    def _model_name(self) -> str | None:
        return self._model_spec or (self._client.model if self._client is not None else None)

    async def _ask(self, messages: list[Message]) -> Completion:
        """The judge model's reply, within `timeout_s` (else `JudgeTimeoutError`)."""
        try:
            return await asyncio.wait_for(self.client.complete(messages, params=self.params), self.timeout_s)
        except TimeoutError:
            model = self._model_spec or self.client.model
            raise JudgeTimeoutError(
                f"LLM judge (model {model!r}) did not reply within {self.timeout_s:g} s"
            ) from None

    def parse_score(self, reply: str) -> float:
        """The normalized score in `reply`, or the default score (with a warning) when there is none."""
        return self._score_of(reply)[0]

    def _score_of(self, reply: str) -> tuple[float, float | None, str | None]:
        """(score, the raw number parsed or None, the warning this reply caused or None)."""
        matches = list(self.score_regex.finditer(reply or ""))
        if not matches:
            reason = f"judge reply has no score matching {self.score_regex.pattern!r}"
            return self._fallback(reason, reply)
        match = matches[-1]
        text = match.group(1) if match.re.groups else match.group(0)
        try:
            raw = float(text)
        except (TypeError, ValueError):
            return self._fallback(f"judge score {text!r} is not a number", reply)
        if not math.isfinite(raw):
            return self._fallback(f"judge score {text!r} is not finite", reply)
        score, warning = self._normalize(raw)
        return score, raw, warning

    def _normalize(self, raw: float) -> tuple[float, str | None]:
        if callable(self.normalize):
            return float(self.normalize(raw)), None
        if not self.normalize:
            return raw, None
        low, high = self.score_range
        warning = None
        if raw < low or raw > high:
            warning = self._warn(f"judge score {raw:g} is outside {low:g}-{high:g}; clamped")
            raw = min(max(raw, low), high)
        return (raw - low) / (high - low), warning

    def _fallback(self, reason: str, reply: str) -> tuple[float, None, str]:
        shown = (reply or "").strip().replace("\n", " ")
        shown = shown if len(shown) <= 200 else shown[:200] + "..."
        warning = self._warn(f"{reason}; used default score {self.default_score:g} (reply: {shown!r})")
        return self.default_score, None, warning

    def _warn(self, message: str) -> str:
        self.last_warning = message
        self.warnings.append(message)
        del self.warnings[:-MAX_KEPT_WARNINGS]
        record_warning(message)
        return message


def _finish(call: JudgeCall, started: float, error: str | None) -> JudgeLog | None:
    """The open judge log (None when none is), `call` completed with its duration and error."""
    log = current_judge_log()
    if log is not None:
        call.duration_sec, call.error = time.perf_counter() - started, error
    return log


async def _record(call: JudgeCall, started: float, error: str | None = None) -> None:
    """Append `call` to the trial's judge log, when one is open; a failed write is a warning, not a score."""
    log = _finish(call, started, error)
    try:
        if log is not None:
            await log.append(call)
    except OSError as exc:
        record_warning(f"could not record a judge call in {JUDGE_LOG}: {exc}")


def _record_now(call: JudgeCall, started: float, error: str) -> None:
    """`_record` without waiting: for a call being cancelled."""
    log = _finish(call, started, error)
    with contextlib.suppress(OSError):
        if log is not None:
            log.append_now(call)


def _template_fields(action: Any, observation: Any) -> dict[str, Any]:
    """The names a judge template may use, for this action and observation."""
    fields: dict[str, Any] = {}
    if isinstance(observation, RubricObservation):
        fields.update(observation.data)
        fields.update(prompt=observation.prompt or "", rewards=observation.rewards)
    elif isinstance(observation, Mapping):
        fields.update({str(k): v for k, v in observation.items()})
    fields.update(action=action, completion=action, observation=observation)
    return fields
