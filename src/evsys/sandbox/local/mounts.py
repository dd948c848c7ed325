"""The per-sandbox mount namespace: a size-limited tmpfs holding the overlay's upper dir, and the overlay
itself.

`ChildSetup` describes what `evsysd --setup` (native/setup.c) does on the host just before it execs
bubblewrap: create and join the sandbox's cgroups with their limits, give it a network namespace of its own,
make a private mount namespace, mount a tmpfs (size = storage limit) on the shared mount point, and mount the
overlay (lower = idmapped views of the cached layers in which the
agent's files belong to the sandbox's agent uid, upper = that tmpfs) inside it, then join a user
namespace of the sandbox's own (owned by its agent uid, every id mapped to itself: uids.py). The
host's mount table never sees any of it, and the whole namespace disappears with the sandbox's last process,
so teardown leaks nothing even after a SIGKILL. Without a pids cgroup, the child starts with RLIMIT_NPROC set
(limits.py).
"""

from __future__ import annotations


class ChildSetup:
    """The parameters of one sandbox's setup step, as the spawner passes them to `evsysd --setup`."""

    def __init__(
        self,
        *,
        mount_point: str,
        lowers: list[str],
        storage_bytes: int,
        items: list[str],
        helper: str,
        agent_uid: int,
        cgroup_dirs: list[str] | None = None,
    ) -> None:
        self.mount_point = mount_point
        self.params = {
            "mount_point": mount_point,
            "lowers": list(lowers),
            "storage_bytes": storage_bytes,
            # in order: cgroups (SandboxCgroup.setup_items), `nproc=<n>` (RLIMIT_NPROC where no pids cgroup
            # holds the limit), `netns` (a network namespace of its own) or `joinnet=<path>` (its pod's)
            "items": list(items),
            "helper": helper,
            "agent_uid": agent_uid,
            # made by the spawner before the child starts (spawner.make_dirs); the items then use them
            "cgroup_dirs": list(cgroup_dirs or []),
        }

    @property
    def root(self) -> str:
        """Where the merged root filesystem appears inside the child's mount namespace."""
        return f"{self.mount_point}/merged"
