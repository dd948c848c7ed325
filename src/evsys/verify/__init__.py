"""Rewards: the `Verifier` protocol, Harbor's reward-file rules and the `ScriptVerifier`."""

from evsys.verify.base import (
    RewardInvalidError,
    RewardMissingError,
    Verifier,
    VerifierError,
    VerifierResult,
    VerifierTimeoutError,
    parse_reward_json,
    parse_reward_txt,
    primary_reward,
    read_reward_files,
)
from evsys.verify.script import ScriptVerifier

__all__ = [
    "RewardInvalidError",
    "RewardMissingError",
    "ScriptVerifier",
    "Verifier",
    "VerifierError",
    "VerifierResult",
    "VerifierTimeoutError",
    "parse_reward_json",
    "parse_reward_txt",
    "primary_reward",
    "read_reward_files",
]
