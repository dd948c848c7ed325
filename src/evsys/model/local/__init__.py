"""The in-process model engine (`local`, `local:/path`): transformers on CPU with token-exact records.

`LocalModelClient.policy()` gives a trainer the running engine's model and tokenizer (`LocalPolicy`) and loads
new weights between rollout batches (docs/training.md)."""

from evsys.model.local.client import LocalModelClient
from evsys.model.local.policy import LocalPolicy

__all__ = ["LocalModelClient", "LocalPolicy"]
