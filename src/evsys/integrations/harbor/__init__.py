"""evsys as Harbor's sandbox: `EvsysEnvironment`, an environment on Harbor's `BaseEnvironment` contract
backed by an evsys sandbox (docs/integrations.md).

    pip install 'evsys[harbor]'
    harbor run -p tasks/ -a oracle -e evsys.integrations.harbor:EvsysEnvironment -n 32

Harbor needs Python >= 3.12 and is not one of evsys's dependencies: this package imports without it, and
`EvsysEnvironment` is imported from Harbor's side only when asked for (an ImportError naming the extra
otherwise).
"""

from __future__ import annotations

from typing import Any

from evsys.integrations.harbor.runtime import EnvironmentRequest, EnvironmentRuntime, HarborOptions

__all__ = ["EnvironmentRequest", "EnvironmentRuntime", "EvsysEnvironment", "HarborOptions"]

INSTALL_HINT = "pip install 'evsys[harbor]' (Harbor needs Python >= 3.12)"


def __getattr__(name: str) -> Any:
    """`EvsysEnvironment`, imported on first use (it subclasses Harbor's `BaseEnvironment`)."""
    if name != "EvsysEnvironment":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        from evsys.integrations.harbor.environment import EvsysEnvironment
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] != "harbor":
            raise
        raise ImportError(f"EvsysEnvironment needs Harbor >= 0.25 ({exc}): {INSTALL_HINT}") from exc
    return EvsysEnvironment
