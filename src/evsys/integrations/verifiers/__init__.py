"""evsys sandboxes as the runtime of verifiers (v1): `EvsysRuntime`, its `EvsysConfig`, and `EvsysEnv`, the
single-agent env that places each rollout in an evsys sandbox; and evsys Python tasks (their own tools and
respond hooks) as a verifiers taskset, `EvsysTaskset` played by `EvsysHarness` (docs/integrations.md).

Importing this package needs no verifiers; the names below load it on first use (`pip install
'evsys[verifiers]'`)."""

from __future__ import annotations

from evsys.util.imports import lazy_exports

_EXPORTS = {
    "EvsysConfig": "evsys.integrations.verifiers.runtime",
    "EvsysRuntime": "evsys.integrations.verifiers.runtime",
    "EvsysRuntimeInfo": "evsys.integrations.verifiers.runtime",
    "EvsysProcess": "evsys.integrations.verifiers.runtime",
    "EvsysEnv": "evsys.integrations.verifiers.env",
    "EvsysEnvConfig": "evsys.integrations.verifiers.env",
    "provision_evsys_runtime": "evsys.integrations.verifiers.env",
    "EvsysTaskset": "evsys.integrations.verifiers.turns",
    "EvsysTask": "evsys.integrations.verifiers.turns",
    "EvsysTaskData": "evsys.integrations.verifiers.turns",
    "EvsysHarness": "evsys.integrations.verifiers.turns",
}
__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(
    __name__, _EXPORTS, ("verifiers", "pydantic_config"), "verifiers: pip install 'evsys[verifiers]'"
)
