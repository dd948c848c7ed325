"""The local engine as a trainable policy: its torch model and tokenizer for a trainer, and weight updates.

```python
client = LocalModelClient("/path/to/hf-model")      # the same engine `run_rollouts(model="local:...")` uses
policy = await client.policy()
trainer_model = policy.trainable_copy()             # train this one; the engine keeps sampling its own
groups = await run_rollouts(items, model=client, num_samples=8)
...                                                  # policy-gradient step on trainer_model
version = await policy.load_weights(trainer_model.state_dict())
```

Weights are loaded between generations: the engine's batching scheduler lets the running batch finish, copies
the new weights in, and only then starts the requests that arrived meanwhile, so no generation ever sees
half-updated weights. Every generation records the `weights_version` that sampled it (in `Completion`, each
trajectory step's metrics and `RolloutTrajectory.weights_version`); the version starts at 0 and each load
sets the version the trainer gives (`load_weights(state, version=step)`) or adds 1.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evsys.model.local.client import SharedEngine
    from evsys.model.local.engine import LocalEngine
    from evsys.model.render import Renderer


class LocalPolicy:
    """A running local engine seen by a trainer: `model`, `tokenizer`, `renderer`, `weights_version`."""

    def __init__(self, shared: SharedEngine, engine: LocalEngine) -> None:
        self._shared = shared
        self._engine = engine

    @property
    def model(self) -> Any:
        """The engine's torch model (eval mode, CPU, float32). Read it; train a `trainable_copy()` instead."""
        return self._engine.model

    @property
    def tokenizer(self) -> Any:
        """The engine's Hugging Face tokenizer."""
        return self._engine.tokenizer

    @property
    def renderer(self) -> Renderer:
        """How the engine renders chats into prompt ids and parses completions."""
        return self._engine.renderer

    @property
    def weights_version(self) -> int:
        """The version of the weights new generations are sampled with (0 = as loaded; +1 per load)."""
        return self._engine.weights_version

    def trainable_copy(self) -> Any:
        """A deep copy of the engine's model in train mode with gradients on: the model a trainer updates
        while the engine keeps sampling from its own weights until `load_weights`."""
        model = copy.deepcopy(self._engine.model)
        model.train()
        model.requires_grad_(True)
        return model

    async def load_weights(self, state_dict: Mapping[str, Any], version: int | None = None) -> int:
        """Copy `state_dict` (e.g. `trainer_model.state_dict()`; every key must match) into the running engine
        between generations; returns the new weights version: `version` when given (the trainer's step, which
        every sample then records), else the old one + 1."""
        return await self._shared.load_weights(state_dict, version)
