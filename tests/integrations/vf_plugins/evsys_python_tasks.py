"""verifiers taskset plugin (`vf-eval evsys_python_tasks --env.taskset.dataset <dataset>`): evsys Python tasks
with their own tools and respond hooks, each rollout an evsys episode."""

from evsys.integrations.verifiers import EvsysHarness, EvsysTaskset

__all__ = ["EvsysHarness", "EvsysTaskset"]
