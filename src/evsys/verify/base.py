"""The `Verifier` protocol, its result, the reward-file errors and Harbor's reward-file parsing rules.

A verifier scores what the agent left in the sandbox. Harbor semantics: the test script writes
`/logs/verifier/reward.json` (a flat JSON object of finite numbers; wins when both exist) or
`/logs/verifier/reward.txt` (one number, read as `{"reward": x}`). Every way a reward file can be wrong is a
distinct, clearly worded error naming the file.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, Field

from evsys.sandbox.base import Sandbox

REWARD_JSON = "reward.json"
REWARD_TXT = "reward.txt"
MAX_REWARD_FILE_BYTES = 1 << 20


class VerifierError(Exception):
    """The verifier could not produce a reward; `cause` is the trial's failure cause."""

    cause = "verifier_error"


class VerifierTimeoutError(VerifierError):
    """The test script ran past the verifier timeout."""

    cause = "verifier_timeout"


class RewardMissingError(VerifierError):
    """The test script wrote neither reward.json nor reward.txt."""

    cause = "reward_missing"


class RewardInvalidError(VerifierError):
    """A reward file exists but is empty, unparseable, non-finite or of the wrong shape."""

    cause = "reward_invalid"


class VerifierResult(BaseModel):
    """The rewards of one trial. `reward` is the primary scalar (see `primary_reward`)."""

    rewards: dict[str, float] = Field(default_factory=dict)
    reward: float = 0.0
    source: str | None = Field(None, description="The file the rewards were read from.")


@runtime_checkable
class Verifier(Protocol):
    """Scores a finished agent run. Raises a `VerifierError` subclass when there is no valid reward."""

    async def verify(self, sandbox: Sandbox, logs_dir: Path) -> VerifierResult:
        """Run the checks in `sandbox`, copy the verifier's files to host dir `logs_dir`, return rewards."""
        ...


def primary_reward(rewards: dict[str, float]) -> float:
    """The trial's primary reward: the `reward` key when present, else the mean of all keys (0 when empty)."""
    if "reward" in rewards:
        return rewards["reward"]
    if not rewards:
        return 0.0
    return sum(rewards.values()) / len(rewards)


def _finite_number(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        kind = "an object" if isinstance(value, dict) else f"{type(value).__name__} {json.dumps(value)[:40]}"
        raise RewardInvalidError(f"{where} holds {kind}, expected a number")
    number = float(value)
    if not math.isfinite(number):
        raise RewardInvalidError(f"{where} is {value}, expected a finite number")
    return number


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
    return {str(key): _finite_number(value, f"{file} key '{key}'") for key, value in data.items()}


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
    return VerifierResult(rewards=rewards, reward=primary_reward(rewards), source=source)
