"""The in-process model engine (`local`, `local:/path`): transformers on CPU with token-exact records."""

from evsys.model.local.client import LocalModelClient

__all__ = ["LocalModelClient"]
