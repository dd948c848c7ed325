"""evsys for Tinker and tinker-cookbook (docs/integrations.md):

- `sandbox_factory()` / `EvsysSandbox`: evsys sandboxes for the cookbook's `harbor_rl` recipe (its
  `SandboxFactory`), in place of its Modal sandboxes; the recipe keeps its own tools and grader.
- `EvsysEnvGroupBuilder`, `EvsysRLDataset`, `EvsysDatasetBuilder`: cookbook RL environments over any evsys
  tasks (task directories, Python tasks, repository rows), each env an evsys trial: its sandbox, the loop
  agent's tools, and the task's verifier chain for the reward.
- `LocalTokenCompleter`: the cookbook's `TokenCompleter` over evsys's local engine (tokens and logprobs).
- `TinkerModelClient`: the `tinker:` model provider (evsys.model.tinker_client), sampling through the SDK.

Importing this package needs neither the SDK nor the cookbook; the names below load them on first use
(`pip install 'evsys[tinker]'`)."""

from __future__ import annotations

from evsys.util.imports import lazy_exports

_EXPORTS = {
    "EvsysSandbox": "evsys.integrations.tinker.sandbox",
    "TinkerSandboxFactory": "evsys.integrations.tinker.sandbox",
    "sandbox_factory": "evsys.integrations.tinker.sandbox",
    "start_task_sandbox": "evsys.integrations.tinker.sandbox",
    "EvsysEnvGroupBuilder": "evsys.integrations.tinker.envs",
    "EvsysRLDataset": "evsys.integrations.tinker.envs",
    "EvsysDatasetBuilder": "evsys.integrations.tinker.envs",
    "LocalTokenCompleter": "evsys.integrations.tinker.local",
    "TinkerModelClient": "evsys.model.tinker_client",
}
__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(
    __name__, _EXPORTS, ("tinker", "tinker_cookbook", "chz"), "tinker-cookbook: pip install 'evsys[tinker]'"
)
