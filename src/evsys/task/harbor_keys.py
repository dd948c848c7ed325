"""Every key of Harbor's `task.toml` schema (Harbor 0.25, schema 1.4), and what evsys does with the ones its
own `TaskConfig` does not model.

`task.toml` files are written for Harbor. A key Harbor defines is never "unknown" to `evsys tasks check`:
- descriptive keys (authors, keywords, the OS, the source...) are accepted silently;
- keys that change how a task runs and that evsys does not apply yet are reported once, as a warning that says
  so, so a user never believes a behaviour is in effect when it is not.
A key neither Harbor nor evsys defines is a typo until proven otherwise: it gets a warning with the closest
known key ("did you mean ...").

The tree below lists key names only: `KeyTree` maps a key to `None` (a leaf) or to the tree of a table (an
array of tables has the same tree for each element).
"""

from __future__ import annotations

from evsys.util.registry import closest

KeyTree = dict[str, "KeyTree | None"]

_NETWORK: KeyTree = {"network_mode": None, "allowed_hosts": None}
_HEALTHCHECK: KeyTree = {
    "command": None,
    "interval_sec": None,
    "timeout_sec": None,
    "start_period_sec": None,
    "start_interval_sec": None,
    "retries": None,
}
_ENVIRONMENT: KeyTree = {
    "build_timeout_sec": None,
    "docker_image": None,
    "os": None,
    "cpus": None,
    "memory_mb": None,
    "storage_mb": None,
    "gpus": None,
    "gpu_types": None,
    "tpu": {"type": None, "topology": None},
    "mcp_servers": dict.fromkeys(("name", "transport", "url", "command", "args", "headers")),
    "env": None,
    "skills_dir": None,
    "healthcheck": _HEALTHCHECK,
    "workdir": None,
    "allow_internet": None,
    "memory": None,
    "storage": None,
    **_NETWORK,
}
_AGENT: KeyTree = {"timeout_sec": None, "user": None, **_NETWORK}
_ARTIFACT: KeyTree = {"source": None, "destination": None, "exclude": None, "service": None}
_VERIFIER: KeyTree = {
    "timeout_sec": None,
    "env": None,
    "user": None,
    "environment_mode": None,
    "environment": _ENVIRONMENT,
    "collect": {"command": None, "service": None, "timeout_sec": None, "user": None},
    **_NETWORK,
}

HARBOR_KEYS: KeyTree = {
    "schema_version": None,
    "version": None,  # the older spelling of schema_version (every Terminal-Bench 2.0 task has it)
    "task": {
        "name": None,
        "version": None,
        "description": None,
        "authors": {"name": None, "email": None},
        "keywords": None,
    },
    "metadata": None,
    "verifier": _VERIFIER,
    "agent": _AGENT,
    "environment": _ENVIRONMENT,
    "solution": {"env": None},
    "source": None,
    "multi_step_reward_strategy": None,
    "steps": {
        "name": None,
        "agent": _AGENT,
        "verifier": _VERIFIER,
        "min_reward": None,
        "healthcheck": _HEALTHCHECK,
        "artifacts": _ARTIFACT,
    },
    "artifacts": _ARTIFACT,
}

# Harbor keys that change how a task runs and that evsys does not apply yet (dotted, "[]" never written).
NOT_APPLIED: dict[str, str] = {
    "environment.gpu_types": "GPU selection",
    "environment.tpu": "TPUs",
    "environment.skills_dir": "agent skills",
    "verifier.environment": "a separate verifier environment",
    "verifier.collect": "collect commands in compose services",
    "artifacts.exclude": "artifact excludes",
    "artifacts.service": "compose services",
    "steps.healthcheck": "step healthchecks",
    "steps.artifacts": "artifact collection",
    "steps.verifier.environment_mode": "a separate verifier environment",
    "steps.verifier.environment": "a separate verifier environment",
    "steps.verifier.collect": "collect commands in compose services",
}


def not_applied_reason(dotted: str) -> str | None:
    """What evsys does not apply yet when `dotted` is set (None: evsys applies it, or it only describes)."""
    return NOT_APPLIED.get(dotted)


def suggest(key: str, candidates: list[str]) -> str | None:
    """The known key closest to a misspelt `key`, if one is close enough to be a likely typo."""
    matches = closest(key, candidates, cutoff=0.75)
    return matches[0] if matches else None
