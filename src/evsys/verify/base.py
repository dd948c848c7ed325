"""The verifier seam: the `Verifier` protocol, its one result type, errors, and Harbor's reward-file rules.

A verifier scores a finished agent run. The engine runs a chain of them (`evsys.verify.chain`): the task's
test script, then a verifier function or rubric, each seeing the rewards before it. Every verifier returns a
`VerifierResult` (rewards, or an error; warnings); a `VerifierError` subclass carries the trial's
`failure_cause` (a `CausedError`, like agent and model errors).

One validator, `finite_number`, checks every reward wherever it comes from (reward files, verifier
functions, rubrics): a finite real number. Booleans are accepted as 1.0 / 0.0 (Python's `True == 1`): a
verifier returning `answer == expected` and a reward.json holding `{"reward": true}` both mean 1.0.

Harbor semantics for the test script: it writes `/logs/verifier/reward.json` (a flat JSON object of finite
numbers; wins when both exist) or `/logs/verifier/reward.txt` (one number, read as `{"reward": x}`). Every way
a reward file can be wrong is a distinct, clearly worded error naming the file.
"""

from __future__ import annotations

import json
import math
import numbers
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from evsys.records import CausedError, FailureCause, IntegrityFinding

REWARD_JSON = "reward.json"
REWARD_TXT = "reward.txt"
MAX_REWARD_FILE_BYTES = 1 << 20


class VerifierError(CausedError):
    """The verifier could not produce a reward; `failure_cause` is the trial's failure cause."""

    failure_cause = FailureCause.VERIFIER_ERROR


class VerifierTimeoutError(VerifierError):
    """The test script ran past the verifier timeout."""

    failure_cause = FailureCause.VERIFIER_TIMEOUT


class RewardMissingError(VerifierError):
    """The test script wrote neither reward.json nor reward.txt."""

    failure_cause = FailureCause.REWARD_MISSING


class RewardInvalidError(VerifierError, ValueError):
    """A reward (file, function return, rubric score) is empty, unparseable, non-finite or misshapen."""

    failure_cause = FailureCause.REWARD_INVALID


class VerifierResult(BaseModel):
    """What one verifier produced: rewards (empty on error), the error if any, and non-fatal warnings.

    `reward` is the primary scalar (see `primary_reward`). Verifier functions may return one of these.
    """

    rewards: dict[str, float] = Field(default_factory=dict)
    error: str | None = None
    traceback: str | None = Field(None, description="The formatted traceback when the verifier raised.")
    warnings: list[str] = Field(default_factory=list, description="E.g. an LLM judge reply without a score.")
    source: str | None = Field(None, description="Where the rewards came from (a reward file, a function).")
    timed_out: bool = Field(False, description="The verifier (or its judge) ran past its limit.")
    integrity: list[IntegrityFinding] = Field(
        default_factory=list, description="What the verifier saw the run try against its grader."
    )

    @property
    def ok(self) -> bool:
        """True when the verifier produced rewards without an error."""
        return self.error is None

    @property
    def reward(self) -> float:
        """The primary reward: `rewards["reward"]`, else the mean of the keys; 0 when there are none."""
        return primary_reward(self.rewards)


@runtime_checkable
class Verifier(Protocol):
    """One link of the verifier chain (`evsys.verify.chain`): scores a finished agent run.

    `run_in_sandbox(ctx)` runs while the sandbox is alive, before the engine copies /logs out (the test
    script places and runs the tests there; other links do nothing). `verify(ctx)` then returns a
    `VerifierResult` from what it sees in the `VerifyContext`: the host copy of /logs/verifier, the
    completion and trajectory, the rewards of the links before it. Either raises a `VerifierError` subclass
    when there is no valid reward; a result with an `error` fails the trial too (`verifier_error`).
    """

    name: str
    needs_sandbox: bool

    async def run_in_sandbox(self, ctx: Any) -> None:
        """The in-sandbox half (may do nothing)."""
        ...

    async def verify(self, ctx: Any) -> VerifierResult:
        """Score the run described by `ctx` (an `evsys.verify.chain.VerifyContext`)."""
        ...


def primary_reward(rewards: dict[str, float]) -> float:
    """The trial's primary reward: the `reward` key when present, else the mean of all keys (0 when empty)."""
    if "reward" in rewards:
        return rewards["reward"]
    if not rewards:
        return 0.0
    return sum(rewards.values()) / len(rewards)


def finite_number(value: Any, subject: str) -> float:
    """`value` as a finite float (bools count 1/0); else a `RewardInvalidError` "<subject> ..., expected ...".

    The one reward validator: reward files, verifier functions and rubric scores all go through it.
    """
    if isinstance(value, bool):
        return float(value)
    if not isinstance(value, numbers.Real):
        kind = "an object" if isinstance(value, dict) else f"{type(value).__name__} {_shown(value)}"
        raise RewardInvalidError(f"{subject} {kind}, expected a number")
    number = float(value)
    if not math.isfinite(number):
        raise RewardInvalidError(f"{subject} {value}, expected a finite number")
    return number


def _shown(value: Any) -> str:
    try:
        return json.dumps(value)[:40]
    except (TypeError, ValueError):
        return repr(value)[:40]


def parse_reward_json(text: str, file: str = REWARD_JSON) -> dict[str, float]:
    """Parse reward.json: a non-empty flat JSON object whose values are finite numbers."""
    if not text.strip():
        raise RewardInvalidError(f"{file} is empty, expected a JSON object of numbers")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise RewardInvalidError(f"{file} is not valid JSON ({exc}); expected an object of numbers") from None
    if not isinstance(data, dict):
        kind = type(data).__name__ if data is not None else "null"
        raise RewardInvalidError(f'{file} holds a JSON {kind}, expected an object like {{"reward": 1.0}}')
    if not data:
        raise RewardInvalidError(f"{file} holds an empty object, expected at least one reward key")
    return {str(key): finite_number(value, f"{file} key '{key}' holds") for key, value in data.items()}


def parse_reward_txt(text: str, file: str = REWARD_TXT) -> dict[str, float]:
    """Parse reward.txt: exactly one number, returned as `{"reward": x}`."""
    stripped = text.strip()
    if not stripped:
        raise RewardInvalidError(f"{file} is empty, expected a number")
    try:
        number = float(stripped)
    except ValueError:
        shown = stripped if len(stripped) <= 40 else stripped[:40] + "..."
        raise RewardInvalidError(f"{file} holds '{shown}', expected a number") from None
    if not math.isfinite(number):
        raise RewardInvalidError(f"{file} holds '{stripped}', expected a finite number")
    return {"reward": number}


def _read_reward_file(path: Path) -> str:
    if path.is_symlink():
        raise RewardInvalidError(f"{path.name} is a symbolic link, expected a regular file")
    if path.stat().st_size > MAX_REWARD_FILE_BYTES:
        raise RewardInvalidError(f"{path.name} is larger than {MAX_REWARD_FILE_BYTES} bytes")
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise RewardInvalidError(f"{path.name} is not UTF-8 text") from None


def read_reward_files(verifier_dir: Path) -> VerifierResult:
    """Read the rewards from a host copy of /logs/verifier: reward.json wins over reward.txt."""
    json_path, txt_path = verifier_dir / REWARD_JSON, verifier_dir / REWARD_TXT
    if json_path.exists() or json_path.is_symlink():
        rewards = parse_reward_json(_read_reward_file(json_path))
        source = REWARD_JSON
    elif txt_path.exists() or txt_path.is_symlink():
        rewards = parse_reward_txt(_read_reward_file(txt_path))
        source = REWARD_TXT
    else:
        raise RewardMissingError(
            f"the test script wrote no reward: neither /logs/verifier/{REWARD_JSON} nor "
            f"/logs/verifier/{REWARD_TXT} exists (see verifier/test-stdout.txt)"
        )
    return VerifierResult(rewards=rewards, source=source)
