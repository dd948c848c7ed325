"""Waiting on processes and pipes from the event loop without ever blocking it (pidfds, fds by readiness)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading


async def wait_readable(fd: int) -> None:
    """Wait (on the event loop, never blocking it) until `fd` is readable."""
    loop = asyncio.get_running_loop()
    ready = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        loop.remove_reader(fd)


async def wait_child(pid: int, pidfd: int, kill_after: float) -> int | None:
    """Wait for a child this process started (posix_spawn) to exit, through its pidfd, never blocking the
    loop; reap it and return its exit code, or None when it ran past `kill_after` s and was SIGKILLed. A
    cancelled caller SIGKILLs it too (reaped by a thread): no helper is left behind. Closes `pidfd`."""
    try:
        try:
            await asyncio.wait_for(wait_readable(pidfd), kill_after)
            timed_out = False
        except TimeoutError:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            await wait_readable(pidfd)
            timed_out = True
        except BaseException:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            threading.Thread(target=os.waitpid, args=(pid, 0), daemon=True).start()
            raise
    finally:
        os.close(pidfd)
    _, status = os.waitpid(pid, 0)  # noqa: ASYNC222 - the pidfd said it has exited
    return None if timed_out else os.waitstatus_to_exitcode(status)


async def wait_exit(pidfd: int, kill_after: float) -> bool:
    """Wait (never blocking the loop) until the process of `pidfd` has exited: True, or False when it ran past
    `kill_after` s and was SIGKILLed (and has exited). A cancelled caller SIGKILLs it too. Closes `pidfd`."""
    try:
        try:
            await asyncio.wait_for(wait_readable(pidfd), kill_after)
            return True
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            await wait_readable(pidfd)
            return False
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            raise
    finally:
        os.close(pidfd)


async def kill_and_wait(pidfd: int) -> None:
    """SIGKILL a child and wait until it has exited (even if cancelled meanwhile: the caller removes its
    cgroups next, which the child must not create or join after that); close its pidfd."""
    try:
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        exited = asyncio.ensure_future(wait_readable(pidfd))
        while not exited.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(exited)
    finally:
        os.close(pidfd)


async def read_to_eof(fd: int) -> bytes:
    """Everything written to a pipe until its last writer closes it (here: the child's exec or exit)."""
    os.set_blocking(fd, False)
    data = bytearray()
    while True:
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            await wait_readable(fd)
            continue
        if not chunk:
            return bytes(data)
        data += chunk
