"""Pods on the docker backend: the sandboxes of one pod (a trial's compose sidecars and its main sandbox)
share one network namespace, as a Kubernetes pod does: the first member's container owns it (no network, or
the public one), the others join it (`network_mode=container:<owner>`), and every name of the pod resolves to
127.0.0.1 through each member's /etc/hosts (`extra_hosts`). The same semantics as the local backend, and no
bridge between containers: it works on daemons run without firewall rules (`--iptables=false`) on hosts whose
FORWARD policy drops bridged traffic. Switching a member's network between phases switches the pod's."""

from __future__ import annotations

from evsys.records import PodSpec
from evsys.sandbox.podowners import PodOwners

OWNERS: PodOwners[str] = PodOwners()  # pod name -> the owner's container id


def extra_hosts(pod: PodSpec) -> dict[str, str]:
    """Every name of the pod on loopback."""
    return dict.fromkeys(sorted(set(pod.hosts) | {pod.hostname}), "127.0.0.1")
