"""The records a task declares and a sandbox consumes: `SandboxSpec` (with `FileCopy`, `Bind`, `PodSpec` and
`NetworkMode`), the `ExecResult` of one command (and `ExecutionResult`, the structured outcome of a tool call
on a slot, evsys.sandbox.slots), and `CopyOutLimits` (bounds on copying a tree such as a
trial's `/logs` out of a sandbox).

They live on the ground floor so that tasks (which declare files, networking and log bounds), the engine
(which builds specs) and every backend (which consumes them) name the same records. `CopyOutLimits` is at
once the job-wide setting (`JobConfig.log_limits`, `evsys run --log-limit`), the task's (`[environment.logs]`
in task.toml) and the resolved bounds a trial uses (`TrialConfig.log_limits`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from evsys.records.image import ImageSpec

NetworkMode = Literal["no-network", "public", "allowlist"]
LimitKind = Literal["memory", "pids", "storage"]
"""A resource limit a command can run into: memory (OOM kill), pids (the cap), storage (disk full)."""
DEFAULT_MAX_OUTPUT_BYTES = 4 << 20

MIB = 1 << 20
DEFAULT_MAX_BYTES = 64 * MIB
DEFAULT_MAX_ENTRIES = 20_000
DEFAULT_MAX_DEPTH = 32
DEFAULT_MAX_FILE_BYTES = 32 * MIB
_SUFFIXES = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


class CopyOutLimits(BaseModel):
    """Caps on one copy out; a field left at None is not set here (see `over` and `resolved`)."""

    model_config = ConfigDict(extra="forbid")

    max_bytes: int | None = Field(None, gt=0, description="Total size of the copy (the tar), in bytes.")
    max_entries: int | None = Field(None, gt=0, description="Files, directories and links copied.")
    max_depth: int | None = Field(None, ge=1, le=128, description="Directory levels below the copied root.")
    max_file_bytes: int | None = Field(None, gt=0, description="Bytes kept of any one file (its head).")

    def over(self, fallback: CopyOutLimits | None) -> CopyOutLimits:
        """These limits, with every field not set here taken from `fallback`."""
        if fallback is None:
            return self
        mine = self.model_dump(exclude_none=True)
        return CopyOutLimits(**(fallback.model_dump(exclude_none=True) | mine))

    def resolved(self) -> CopyOutLimits:
        """Every field set: the evsys defaults fill what is not."""
        return self.over(DEFAULT_LIMITS)


DEFAULT_LIMITS = CopyOutLimits(
    max_bytes=DEFAULT_MAX_BYTES,
    max_entries=DEFAULT_MAX_ENTRIES,
    max_depth=DEFAULT_MAX_DEPTH,
    max_file_bytes=DEFAULT_MAX_FILE_BYTES,
)


def parse_limit(text: str) -> tuple[str, int]:
    """`max_bytes=100M` -> ("max_bytes", 104857600): one `KEY=VALUE` of the `--log-limit` flag (sizes may end
    in K, M or G). ValueError naming the key or value when it is not one."""
    key, sep, value = text.partition("=")
    key = key.strip().replace("-", "_")
    if not sep or key not in CopyOutLimits.model_fields:
        names = ", ".join(CopyOutLimits.model_fields)
        raise ValueError(f"--log-limit {text!r}: expected KEY=VALUE with KEY one of {names}")
    value = value.strip().lower()
    scale = _SUFFIXES.get(value[-1:], 1)
    digits = value[:-1] if scale != 1 else value
    if not digits.isdigit() or int(digits) <= 0:
        raise ValueError(f"--log-limit {text!r}: {value!r} is not a positive whole number (K, M, G allowed)")
    return key, int(digits) * scale


class FileCopy(BaseModel):
    """A host file or directory placed into the sandbox's filesystem before start (Dockerfile COPY/ADD)."""

    model_config = ConfigDict(frozen=True)

    src: Path
    dst: str  # absolute path inside the sandbox
    exclude: tuple[str, ...] = Field(
        (), description="Paths under a directory `src` (relative to it) left out (the task's .dockerignore)."
    )


class Bind(BaseModel):
    """A host file or directory mounted into the sandbox at `dst` (read-only unless `read_only=False`).

    For evsys's own plumbing: a cached harness install tree, the trial's proxy socket. A writable bind gives
    whoever runs in the sandbox write access to the host path: use it only for trusted setup sandboxes."""

    model_config = ConfigDict(frozen=True)

    src: Path
    dst: str  # absolute path inside the sandbox
    read_only: bool = True


class PodSpec(BaseModel):
    """Sandboxes of one pod share a network and reach each other by name (a trial's compose services and
    its main sandbox; Capability.PODS). The local backend puts them in one network namespace (every name
    is 127.0.0.1 in /etc/hosts); the docker backend on a network of the pod's own, with aliases."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(description="Unique per trial.")
    hostname: str = Field(description="This sandbox's name in the pod.")
    hosts: list[str] = Field(default_factory=list, description="Every name in the pod.")


class SandboxSpec(BaseModel):
    """What a trial asks of its sandbox. Built by the engine from a task's configuration."""

    name: str = Field(description="Unique per trial; used for cgroup and scratch-directory names.")
    workdir: str = "/app"
    env: dict[str, str] = Field(default_factory=dict)
    files: list[FileCopy] = Field(
        default_factory=list, description="Placed into the root filesystem at start."
    )
    binds: list[Bind] = Field(default_factory=list, description="Host paths mounted in (see Bind).")
    network: NetworkMode = "no-network"
    allowed_hosts: list[str] = Field(default_factory=list)
    cpus: float | None = None
    memory_mb: int | None = None
    storage_mb: int | None = None
    pids_max: int = 1024
    user: str = Field("agent", description="Default user for exec: 'agent' (unprivileged) or 'root'.")
    image: ImageSpec | None = Field(
        None, description="The image to run (Capability.IMAGES); None: the host-rootfs layer."
    )
    host_python: str | None = Field(
        None,
        description="On the host-rootfs layer only (no image): the major.minor of the host's "
        "/usr/bin/python3.X that a python base stands on; the local sandbox adds the thin python layer "
        "(`python`, `pip` in a /usr/local of its own, pip installing there; sandbox/local/pylayer.py).",
    )
    pod: PodSpec | None = Field(None, description="The pod whose network this sandbox shares (PodSpec).")
    run_entrypoint: bool = Field(
        True,
        description="Run the image's ENTRYPOINT at start, as Harbor's Docker environment does; False for "
        "sidecars, whose service process the caller starts itself.",
    )
    max_output_bytes: int = Field(
        DEFAULT_MAX_OUTPUT_BYTES,
        ge=2,
        description="Output kept per stream of each command: its first and last halves; the middle is "
        "dropped while the command runs (ExecResult records the total).",
    )

    def pool_key(self) -> str:
        """The spec's identity for sandbox pools: everything but the name. Sandboxes of specs with equal keys
        may serve each other's holders (evsys.sandbox.pool; its policies say which specs they keep)."""
        return json.dumps(self.model_dump(mode="json", exclude={"name"}), sort_keys=True)


class ExecResult(BaseModel):
    """The outcome of one command. Output produced before a timeout is kept."""

    stdout_bytes: bytes = b""
    stderr_bytes: bytes = b""
    exit_code: int
    timed_out: bool = False
    duration: float = 0.0
    limits_hit: list[LimitKind] = Field(
        default_factory=list,
        description="Resource limits the command ran into (OOM kill, pids cap, disk full).",
    )
    stdout_total_bytes: int | None = Field(
        None, description="Bytes the command wrote to stdout (None: not counted; all are in stdout_bytes)."
    )
    stdout_head_bytes: int | None = Field(
        None,
        description="When stdout was truncated: the first this many bytes of stdout_bytes are its head, "
        "the rest its tail; what was between them is dropped.",
    )
    stderr_total_bytes: int | None = Field(None, description="As stdout_total_bytes, for stderr.")
    stderr_head_bytes: int | None = Field(None, description="As stdout_head_bytes, for stderr.")

    @property
    def stdout(self) -> str:
        """stdout decoded as UTF-8 (undecodable bytes replaced)."""
        return self.stdout_bytes.decode("utf-8", "replace")

    @property
    def stderr(self) -> str:
        """stderr decoded as UTF-8 (undecodable bytes replaced)."""
        return self.stderr_bytes.decode("utf-8", "replace")

    @property
    def stdout_truncated(self) -> bool:
        """True when the middle of stdout was dropped (the command wrote more than the sandbox keeps)."""
        return (self.stdout_total_bytes or 0) > len(self.stdout_bytes)

    @property
    def stderr_truncated(self) -> bool:
        """True when the middle of stderr was dropped."""
        return (self.stderr_total_bytes or 0) > len(self.stderr_bytes)

    @property
    def stdout_shown(self) -> str:
        """stdout for a reader (a model, a person): decoded, with a marker where the middle was dropped."""
        return marked_output(self.stdout_bytes, self.stdout_total_bytes, self.stdout_head_bytes)

    @property
    def stderr_shown(self) -> str:
        """stderr for a reader, with a marker where the middle was dropped."""
        return marked_output(self.stderr_bytes, self.stderr_total_bytes, self.stderr_head_bytes)

    @property
    def ok(self) -> bool:
        """True when the command exited 0 within its timeout."""
        return self.exit_code == 0 and not self.timed_out


class ExecutionResult(BaseModel):
    """The structured outcome of one tool call on a slot."""

    success: bool
    output: str = ""
    error: str = ""
    exit_code: int | None = None
    timed_out: bool = False
    metadata: dict[str, Any] = Field(default_factory=dict)

    def to_json(self) -> str:
        """What `tool_handler` returns: the result as a JSON string (output, error, exit code)."""
        return json.dumps({"output": self.output, "error": self.error, "exit_code": self.exit_code})


def truncation_marker(omitted: int, total: int) -> str:
    """The line shown to a model where a command's output was cut."""
    return f"\n[... evsys: {omitted:,} bytes of output omitted here ({total:,} bytes in all) ...]\n"


def marked_output(data: bytes, total: int | None, head: int | None) -> str:
    """Kept output `data` decoded, with a `truncation_marker` after its first `head` bytes when `total`
    says more was written than kept."""
    if total is None or total <= len(data):
        return data.decode("utf-8", "replace")
    cut = len(data) if head is None else max(0, min(head, len(data)))
    before = data[:cut].decode("utf-8", "replace")
    after = data[cut:].decode("utf-8", "replace")
    return before + truncation_marker(total - len(data), total) + after
