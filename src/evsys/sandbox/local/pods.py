"""Pods on the local backend: sandboxes that share one network namespace (a trial's compose sidecars and its
main sandbox). The first sandbox of a pod creates the namespace as every sandbox does (its setup step's
`netns`, slirp4netns for public networking) and is the pod's owner; the others start bwrap inside the
owner's namespace (their setup step's `joinnet`, before it enters the sandbox's user namespace, from where
the owner's namespace could not be joined) instead of a new one. Every name of the pod resolves to
127.0.0.1 through each member's /etc/hosts: services reach each other by name on loopback, unreachable from
the host's. A namespace lives as long as a process is in it, so members may stop in any order."""

from __future__ import annotations

from evsys.records import PodSpec
from evsys.sandbox.podowners import PodOwners

HOSTS_FILE = "/etc/hosts"
OWNERS: PodOwners[int] = PodOwners()  # the owner: its daemon pid (its network namespace is the pod's)


def join_item(pid: int) -> str:
    """The setup item (native/setup.c) that joins the network namespace of process `pid`, the pod's owner."""
    return f"joinnet=/proc/{pid}/ns/net"


def hosts_script(pod: PodSpec) -> str:
    """The root shell command that names every member of the pod in /etc/hosts."""
    names = " ".join(sorted(set(pod.hosts) | {pod.hostname}))
    return f"printf '127.0.0.1 %s\\n' '{names}' >> {HOSTS_FILE}"
