"""Which member of a pod owns its network namespace, per orchestrator process (every backend with
`Capability.PODS` keeps one: the local backend by daemon pid, Docker by container id)."""

from __future__ import annotations

from typing import Generic, TypeVar

from evsys.records import PodSpec

Owner = TypeVar("Owner")


class PodOwners(Generic[Owner]):
    """Pod name -> the first member's handle (whose network namespace the others join)."""

    def __init__(self) -> None:
        self._owners: dict[str, Owner] = {}

    def owner(self, pod: PodSpec) -> Owner | None:
        """The member whose network namespace `pod` shares, or None when this sandbox is the first."""
        return self._owners.get(pod.name)

    def register(self, pod: PodSpec, owner: Owner) -> None:
        """Record the first member as the pod's namespace."""
        self._owners.setdefault(pod.name, owner)

    def unregister(self, pod: PodSpec, owner: Owner) -> None:
        """Forget the pod's namespace when its owner goes."""
        if self._owners.get(pod.name) == owner:
            del self._owners[pod.name]
