"""The Docker Engine API, through the official `docker` SDK (the `docker` extra), kept off the event loop.

`client()` connects to `$EVSYS_DOCKER_HOST`, else `$DOCKER_HOST`, else the default socket; podman's
Docker-compatible service (`podman system service`) works the same way. `start_exec`/`read_exec` run one
`docker exec` and stream its multiplexed output through a bounded buffer (head and tail kept, the middle
counted and dropped), so a command that prints gigabytes never holds more than the cap in the orchestrator.
"""

from __future__ import annotations

import functools
import os
import shutil
import socket
import struct
import subprocess
import threading
from dataclasses import dataclass, field
from typing import Any

from evsys.sandbox.base import SandboxError, SandboxUnsupported

DEFAULT_OUTPUT_CAP = 8 << 20  # bytes kept per stream: half from the start, half from the end
_FRAME = struct.Struct(">BxxxI")
_TRUNCATED = b"\n[... %d bytes of output cut by evsys ...]\n"
_LOAD_LOCK = threading.Lock()
# Where images from evsys's storage live in a daemon: one tag per content (the image id), so a daemon never
# runs an older or another image that happens to carry the same name.
CONTENT_REPOSITORY = "localhost/evsys/content"


def sdk() -> Any:
    """The `docker` SDK module; a clear error naming the extra when it is not installed."""
    try:
        import docker
    except ImportError:
        raise SandboxUnsupported(
            "the docker sandbox backend needs the Docker SDK: pip install 'evsys[docker]'"
        ) from None
    return docker


def docker_host() -> str | None:
    """The daemon address evsys uses: $EVSYS_DOCKER_HOST, else $DOCKER_HOST, else None (the SDK's default)."""
    return os.environ.get("EVSYS_DOCKER_HOST") or os.environ.get("DOCKER_HOST") or None


@functools.cache
def _client_for(host: str | None) -> Any:
    docker = sdk()
    try:
        return docker.DockerClient(base_url=host) if host else docker.from_env()
    except docker.errors.DockerException as exc:
        where = host or "the default socket"
        raise SandboxError(f"cannot reach the Docker daemon at {where}: {exc}") from None


def client() -> Any:
    """A `docker.DockerClient` for `docker_host()` (one per address; the SDK's client is thread-safe)."""
    return _client_for(docker_host())


@dataclass
class BoundedBuffer:
    """Keeps the first and last `cap // 2` bytes of a stream and counts what it drops in between."""

    cap: int = DEFAULT_OUTPUT_CAP
    head: bytearray = field(default_factory=bytearray)
    tail: bytearray = field(default_factory=bytearray)
    total: int = 0

    def add(self, data: bytes) -> None:
        """Append `data`, dropping the middle once the cap is reached."""
        self.total += len(data)
        room = self.cap // 2 - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            excess = len(self.tail) - (self.cap - self.cap // 2)
            if excess > 0:
                del self.tail[:excess]

    @property
    def truncated(self) -> bool:
        """Whether bytes were dropped."""
        return self.total > len(self.head) + len(self.tail)

    def value(self) -> bytes:
        """What was kept, with a marker where the middle was cut."""
        if not self.truncated:
            return bytes(self.head + self.tail)
        dropped = self.total - len(self.head) - len(self.tail)
        return bytes(self.head) + _TRUNCATED % dropped + bytes(self.tail)


@dataclass
class ExecStream:
    """One running `docker exec`: its id, raw socket and the bounded output read so far."""

    exec_id: str
    sock: Any
    stdout: BoundedBuffer
    stderr: BoundedBuffer
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


def start_exec(
    container_id: str,
    argv: list[str],
    *,
    user: str,
    workdir: str,
    env: dict[str, str],
    stdin: bytes | None,
    cap: int = DEFAULT_OUTPUT_CAP,
) -> ExecStream:
    """Create and start an exec (blocking; call from a thread); stdin is written and closed at once."""
    api = client().api
    environment = [f"{k}={v}" for k, v in env.items()]
    created = api.exec_create(
        container_id, argv, stdin=True, user=user, workdir=workdir, environment=environment
    )
    raw = api.exec_start(created["Id"], socket=True)
    sock = getattr(raw, "_sock", raw)
    # the SDK's socket keeps the client's HTTP timeout (60 s): a command silent for that long would look
    # finished; the exec's own timeout is enforced by the caller
    sock.settimeout(None)
    stream = ExecStream(created["Id"], sock, BoundedBuffer(cap), BoundedBuffer(cap))
    writer = threading.Thread(target=_feed_stdin, args=(sock, stdin or b""), daemon=True)
    writer.start()
    return stream


def _feed_stdin(sock: Any, data: bytes) -> None:
    try:
        if data:
            sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # the command exited without reading all of it


def read_exec(stream: ExecStream) -> None:
    """Read frames until the exec's stream ends (blocking; run in a thread). Sets `stream.done`."""
    pending = b""
    try:
        while True:
            chunk = stream.sock.recv(1 << 16)
            if not chunk:
                break
            pending += chunk
            while len(pending) >= _FRAME.size:
                kind, size = _FRAME.unpack_from(pending)
                if len(pending) < _FRAME.size + size:
                    break
                payload = pending[_FRAME.size : _FRAME.size + size]
                pending = pending[_FRAME.size + size :]
                (stream.stderr if kind == 2 else stream.stdout).add(payload)
    except OSError as exc:
        stream.error = exc
    finally:
        stream.done.set()


def close_exec(stream: ExecStream) -> None:
    """Close the exec's socket (ends a reader still blocked on it)."""
    try:
        stream.sock.close()
    except OSError:
        pass


def load_image(source: str, ref: str) -> None:
    """Copy an image from a skopeo transport reference (evsys's image storage) into the daemon as `ref`
    (blocking; one copy per image, serialised per process)."""
    with _LOAD_LOCK:
        try:
            client().images.get(ref)
            return
        except sdk().errors.ImageNotFound:
            pass
        _copy(source, ref)


def load_content(source: str, image_id: str) -> str:
    """The daemon's name for the image `image_id` of evsys's storage (`CONTENT_REPOSITORY:<id>`), copied from
    `source` the first time any sandbox of the daemon asks for that content (blocking)."""
    ref = f"{CONTENT_REPOSITORY}:{image_id.removeprefix('sha256:')[:64]}"
    load_image(source, ref)
    return ref


def _copy(source: str, ref: str) -> None:
    skopeo = shutil.which("skopeo")
    if skopeo is None:
        raise SandboxError("loading an evsys image into Docker needs skopeo (apt-get install skopeo)")
    command = [skopeo, "copy", "--quiet", source, f"docker-daemon:{_tagged(ref)}"]
    host = docker_host()
    if host:
        command[2:2] = ["--dest-daemon-host", host]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise SandboxError(f"copying image {ref} into Docker failed: {done.stderr.strip()[-800:]}")


def _tagged(ref: str) -> str:
    """`ref` with `:latest` when it names no tag (the docker-daemon transport needs one)."""
    name = ref.rsplit("/", 1)[-1]
    return ref if ":" in name or "@" in name else f"{ref}:latest"


def exit_code(exec_id: str) -> int | None:
    """The exec's exit code, or None while it still runs."""
    info = client().api.exec_inspect(exec_id)
    return None if info.get("Running") else info.get("ExitCode")
