"""The worker half of the `processes` executor: one process of many trials on one event loop.

The driver starts it as a fresh interpreter (never a fork of the driver, whose event loop and threads a fork
would copy half-way) with the driver's `sys.path` (so agents and verifiers named by import path load the
same) and one end of a unix socket pair as its fd. Messages both ways are frames: an 8-byte header (two
big-endian lengths), a small JSON header, then a body of bytes:

  driver -> worker   {"op": "hello", ...settings}          body: -
                     {"op": "run", "id": n, "events": b}    body: the TrialSpec's JSON
                     {"op": "cancel", "id": n}              body: -
  worker -> driver   {"op": "ready", "pid": p}              body: -
                     {"op": "done", "id": n}                body: the TrialResult's JSON
                     {"op": "cancelled", "id": n, "recorded": b}  body: - (b: the trial recorded it itself)
                     {"op": "error", "id": n, "message": s} body: - (the trial could not start here)
                     {"op": "event", "id": n}               body: a live agent event (JSON), when asked for

Each trial writes its own directory of the job straight through a `JobStore` of the job directory, exactly as
an in-process trial would (every file atomic, result.json last and fsynced); the driver reads only the
result in the `done` frame. The worker ignores SIGINT and SIGTERM (a terminal or a service manager sends them
to the whole process group; the driver decides what they cancel) and, when
the driver goes away (EOF on the socket), cancels its trials — each records `cancelled` — and exits.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

HEADER = struct.Struct(">II")
Frame = tuple[dict[str, Any], bytes]


def encode(header: dict[str, Any], body: bytes = b"") -> bytes:
    """One frame: lengths, JSON header, body."""
    head = json.dumps(header, separators=(",", ":")).encode()
    return HEADER.pack(len(head), len(body)) + head + body


async def read_frame(reader: asyncio.StreamReader) -> Frame | None:
    """The next frame, or None at the end of the stream (the other side is gone)."""
    try:
        lengths = await reader.readexactly(HEADER.size)
        head_len, body_len = HEADER.unpack(lengths)
        data = await reader.readexactly(head_len + body_len)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    return json.loads(data[:head_len]), data[head_len:]


class WorkerLoop:
    """The trials this process runs, by the driver's ids, and the replies it sends back."""

    def __init__(self, writer: asyncio.StreamWriter, hello: dict[str, Any]) -> None:
        from evsys.engine.executors.worker import TrialRuntime
        from evsys.engine.store import JobStore

        self.writer = writer
        self.store = JobStore(Path(hello["job_dir"]))
        self.runtime = TrialRuntime(
            reuse_sandboxes=hello["reuse_sandboxes"], max_idle=hello["max_idle"], warm=hello["warm"]
        )
        self.trials: dict[int, asyncio.Task[None]] = {}
        self.handlers: dict[str, Callable[[dict[str, Any], bytes], None]] = {
            "run": self.start_trial,
            "cancel": self.cancel_trial,
        }

    def send(self, header: dict[str, Any], body: bytes = b"") -> None:
        """Queue a frame to the driver (the transport writes it without blocking the loop)."""
        if not self.writer.is_closing():
            self.writer.write(encode(header, body))

    def start_trial(self, header: dict[str, Any], body: bytes) -> None:
        """Start the trial of a `run` frame."""
        trial_id = header["id"]
        task = asyncio.create_task(self._run(trial_id, body, bool(header.get("events"))))
        self.trials[trial_id] = task
        task.add_done_callback(lambda _t: self.trials.pop(trial_id, None))

    def cancel_trial(self, header: dict[str, Any], _body: bytes) -> None:
        """Cancel a running trial (it records `cancelled`, then the worker says so)."""
        task = self.trials.get(header["id"])
        if task is not None:
            task.cancel()

    async def _run(self, trial_id: int, body: bytes, events: bool) -> None:
        from evsys.engine.run import run_trial
        from evsys.engine.spec import TrialSpec
        from evsys.engine.trial.state import describe_exception

        try:
            spec = TrialSpec.model_validate_json(body)
            resources = await self.runtime.resources(spec)
            if events:
                resources.on_event = lambda event: self._forward(trial_id, event)
        except asyncio.CancelledError:
            self.send({"op": "cancelled", "id": trial_id, "recorded": False})
            raise
        except Exception as exc:
            self.send({"op": "error", "id": trial_id, "message": describe_exception(exc)})
            return
        try:
            result = await run_trial(spec, self.store, resources)
        except asyncio.CancelledError:
            self.send({"op": "cancelled", "id": trial_id, "recorded": True})
            raise
        self.send({"op": "done", "id": trial_id}, result.model_dump_json().encode())

    def _forward(self, trial_id: int, event: dict[str, Any]) -> None:
        self.send({"op": "event", "id": trial_id}, json.dumps(event, default=str).encode())

    async def serve(self, reader: asyncio.StreamReader) -> None:
        """Handle frames until the driver closes the socket; then cancel what still runs and clean up."""
        try:
            while (frame := await read_frame(reader)) is not None:
                header, body = frame
                self.handlers[header["op"]](header, body)
                await self.writer.drain()
        finally:
            trials = list(self.trials.values())
            for task in trials:
                task.cancel()
            await asyncio.gather(*trials, return_exceptions=True)
            await self.runtime.close()


async def serve(sock: socket.socket) -> None:
    """Greet the driver, then run its trials until it goes away."""
    import os

    reader, writer = await asyncio.open_unix_connection(sock=sock)
    frame = await read_frame(reader)
    if frame is None:
        return
    hello, _ = frame
    worker = WorkerLoop(writer, hello)
    worker.send({"op": "ready", "pid": os.getpid()})
    try:
        await worker.serve(reader)
    finally:
        writer.close()


def main(argv: list[str]) -> None:
    """Entry point: `main([<anything>, FD])` (the driver's boot line sets `sys.path` first)."""
    for signum in (signal.SIGINT, signal.SIGTERM):  # sent to the whole process group: the driver cancels
        signal.signal(signum, signal.SIG_IGN)
    sock = socket.socket(fileno=int(argv[1]))
    asyncio.run(serve(sock))
