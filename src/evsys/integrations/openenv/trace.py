"""An evsys trajectory's model calls as OpenEnv's `TrainingTrace` (validated token capture for trainers).

The document is the one `evsys export --format openenv` writes (`openenv_trace` in
evsys.trajectory.training_rows): one `TrainingTurn` per call that recorded token ids (the local engine, the
recording proxy's calls of a harness) with the engine's own prompt ids, the sampled completion ids and their
logprobs, a loss mask over prompt + completion (0 on the prompt, 0 on a call whose sampling logprobs were not
recorded), the assistant message as `response`, and the capture graph's links in `metadata`. Steps without
token ids (a hosted model that returns none) are left out: OpenEnv's contract forbids re-deriving them.
OpenEnv's own models validate the document.
"""

from __future__ import annotations

from typing import Any

from openenv.core.harness import TrainingTrace

from evsys.records import Trajectory
from evsys.trajectory.training_rows import openenv_trace


def training_trace(trajectory: Trajectory, trial_name: str, **metadata: Any) -> TrainingTrace:
    """The trajectory's calls with token ids, in order, as a validated `TrainingTrace` (`metadata` is added to
    every turn's)."""
    document = openenv_trace(trajectory, {"trial_name": trial_name, **metadata})
    return TrainingTrace.model_validate(document or {"turns": []})
