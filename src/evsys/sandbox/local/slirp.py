"""`public` networking for the local sandbox: the sandbox keeps its own network namespace and reaches the
outside through slirp4netns, a user-mode NAT running on the host (docs/sandbox.md, "Networking").

The sandbox gets `tap0` (10.0.2.100/24, default route via 10.0.2.2, DNS at 10.0.2.3). With
`--disable-host-loopback`, 10.0.2.2 does not lead to the host's 127.0.0.1: services listening only on the
host's loopback stay out of reach, and abstract unix sockets are per namespace anyway. slirp4netns exits when
the write end of its exit pipe closes: at `close()`, or when the orchestrator dies.
"""

from __future__ import annotations

import asyncio
import os
import shutil

from evsys.sandbox.base import SandboxError
from evsys.sandbox.local.waits import wait_child, wait_readable

INSTALL_HINT = "apt-get install slirp4netns"
READY_FD, EXIT_FD = 3, 4
READY_TIMEOUT = 10.0
DNS_SERVER = "10.0.2.3"


def host_tool(program: str, needed_for: str, install_hint: str) -> str:
    """The path of a host program (on PATH, else in the system dirs); SandboxError naming the package."""
    path = shutil.which(program) or shutil.which(program, path="/usr/sbin:/usr/bin:/sbin:/bin")
    if path is None:
        raise SandboxError(f"{needed_for} needs {program}, which is not installed: {install_hint}")
    return path


def slirp_binary() -> str:
    """The slirp4netns executable; SandboxError naming the package when it is missing."""
    return host_tool("slirp4netns", "public networking", INSTALL_HINT)


class SlirpNetwork:
    """A running slirp4netns attached to one sandbox's network namespace."""

    def __init__(self, pid: int, pidfd: int, exit_w: int) -> None:
        self.pid = pid
        self._pidfd = pidfd
        self._exit_w = exit_w

    @classmethod
    async def attach(cls, target_pid: int) -> SlirpNetwork:
        """Start slirp4netns for the network namespace of `target_pid` and wait until tap0 is configured."""
        binary = slirp_binary()
        ready_r, ready_w = os.pipe()
        exit_r, exit_w = os.pipe()
        argv = [binary, "--configure", "--mtu=65520", "--disable-host-loopback"]
        argv += [f"--ready-fd={READY_FD}", f"--exit-fd={EXIT_FD}"]
        # by path: given a pid, slirp4netns would also join the pid's user namespace (the sandbox's own, where
        # it may not configure a network namespace the host made); it stays in the host's
        argv += ["--netns-type=path", f"/proc/{target_pid}/ns/net", "tap0"]
        try:
            pid = os.posix_spawn(  # noqa: ASYNC221 - a vfork+exec: returns in microseconds
                binary,
                argv,
                {"PATH": "/usr/bin:/bin"},
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, ready_w, READY_FD),
                    (os.POSIX_SPAWN_DUP2, exit_r, EXIT_FD),
                    (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
                    (os.POSIX_SPAWN_OPEN, 2, "/dev/null", os.O_WRONLY, 0),
                ],
                setsid=True,
            )
        except OSError as exc:
            os.close(ready_r)
            os.close(exit_w)
            raise SandboxError(f"cannot start slirp4netns: {exc.strerror}") from None
        finally:
            os.close(ready_w)
            os.close(exit_r)
        network = cls(pid, os.pidfd_open(pid), exit_w)
        try:
            await asyncio.wait_for(wait_readable(ready_r), READY_TIMEOUT)
            ready = os.read(ready_r, 1)
        except TimeoutError:
            ready = b""
        finally:
            os.close(ready_r)
        if ready != b"1":
            await network.close()
            raise SandboxError("slirp4netns could not set up the sandbox's network (public networking)")
        return network

    async def close(self) -> None:
        """Stop slirp4netns (it exits when its exit pipe closes; SIGKILL after 2 s) and reap it."""
        if self._exit_w < 0:
            return
        os.close(self._exit_w)
        self._exit_w = -1
        await wait_child(self.pid, self._pidfd, 2.0)
