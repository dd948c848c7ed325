"""evsys trials as OpenEnv 0.10 resource sessions (docs/integrations.md#openenv): `EvsysSessionFactory`
creates `EvsysSession`s (the loop agent's tools in the trial's sandbox, `verify()` = the task's verifier
chain) and, for a harness that owns its loop, `EvsysHarnessSession`s whose `fetch_training_trace()` is built
from the recording proxy's model calls.

Importing this package needs no OpenEnv; the names below load it on first use (`pip install
'openenv==0.10.*'`: it shares its `openenv` module with `openenv-core`, so it lives apart from evsys's dev
install, see scripts/bootstrap.sh)."""

from __future__ import annotations

from evsys.util.imports import lazy_exports

_EXPORTS = {
    "EvsysSession": "evsys.integrations.openenv.sessions",
    "EvsysHarnessSession": "evsys.integrations.openenv.sessions",
    "EvsysSessionFactory": "evsys.integrations.openenv.sessions",
    "training_trace": "evsys.integrations.openenv.trace",
}
__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(
    __name__, _EXPORTS, ("openenv",), "OpenEnv 0.10: pip install 'openenv==0.10.*'", match_message=True
)
