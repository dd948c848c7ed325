"""evsys sandboxes as the runtime of verifiers (v1): `EvsysRuntime`, its `EvsysConfig`, and `EvsysEnv`, the
single-agent env that places each rollout in an evsys sandbox (docs/integrations.md).

Importing this package needs no verifiers; the names below load it on first use (`pip install
'evsys[verifiers]'`)."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "EvsysConfig": "evsys.integrations.verifiers.runtime",
    "EvsysRuntime": "evsys.integrations.verifiers.runtime",
    "EvsysRuntimeInfo": "evsys.integrations.verifiers.runtime",
    "EvsysProcess": "evsys.integrations.verifiers.runtime",
    "EvsysEnv": "evsys.integrations.verifiers.env",
    "EvsysEnvConfig": "evsys.integrations.verifiers.env",
    "provision_evsys_runtime": "evsys.integrations.verifiers.env",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as exc:
        if exc.name is not None and exc.name.split(".")[0] in ("verifiers", "pydantic_config"):
            raise ImportError(
                f"evsys.integrations.verifiers.{name} needs verifiers: pip install 'evsys[verifiers]'"
            ) from exc
        raise
