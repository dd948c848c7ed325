"""The verifier of examples/math: `exact_int` scores 1.0 when the last integer in the completion matches."""

from __future__ import annotations

import re

from evsys.verify.functions import verifier

_INTEGER = re.compile(r"-?\d+")


def last_integer(text: str) -> int | None:
    """The last integer written in `text` (thousands separators removed), or None when there is none."""
    matches = _INTEGER.findall(text.replace(",", ""))
    return int(matches[-1]) if matches else None


@verifier("exact_int")
def exact_int(completion: str, answer: int) -> float:
    """1.0 when the completion's last integer equals `answer`, else 0.0."""
    return 1.0 if last_integer(completion) == int(answer) else 0.0
