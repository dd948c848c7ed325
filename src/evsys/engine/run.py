"""`run_trial(spec)`: one `TrialSpec` in, its `TrialResult` out — in this process, or on a worker elsewhere.

In the driver's process (the local executor) a trial writes straight into the job directory through the
driver's `JobStore`, and may borrow live resources the driver already holds (`TrialResources`: the slot
pool, the model client, an event callback). A worker in another process or on another machine has none of
them: `run_trial_packed(spec)` runs the trial in a scratch directory, rebuilds the model client from the
spec's model string, and returns a `PackedTrial` — the result plus a tar of the trial's files — which the
driver commits with `JobStore.import_trial`. Only the driver ever writes the job directory.
"""

from __future__ import annotations

import asyncio
import io
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from evsys.agent.registry import talks_to_model
from evsys.engine.image_services import ImageServices
from evsys.engine.spec import TrialSpec
from evsys.engine.store import JobStore
from evsys.engine.trial import Trial
from evsys.model.base import ModelClient, close_model_client
from evsys.records import TrialResult
from evsys.sandbox.pool import SandboxPool
from evsys.task.models import Task


@dataclass
class TrialResources:
    """Live objects a trial in the driver's process may borrow (never serialised, never closed by it)."""

    pool: SandboxPool | None = None  # the job's: every trial leases its sandboxes from it
    model_client: ModelClient | None = None
    on_event: Callable[[dict[str, Any]], None] | None = None
    task: Task | None = None  # the task as the planner loaded it
    images: ImageServices | None = None  # the job's (its build progress on the job's event stream)


def needs_model(spec: TrialSpec) -> bool:
    """True when the trial's agent talks to a model (given a model string; see `Agent.model_use`)."""
    agent = spec.config.agent
    return talks_to_model(agent.name, agent.model)


def build_model_client(spec: TrialSpec) -> ModelClient | None:
    """The model client for the spec's model string and settings, built where the trial runs."""
    from evsys.model.spec import create_model_client

    agent = spec.config.agent
    if agent.model is None:
        raise ValueError(f"trial {spec.config.trial_name}: agent '{agent.name}' has no model")
    return create_model_client(agent.model, base_url=agent.base_url)


async def run_trial(spec: TrialSpec, store: JobStore, resources: TrialResources | None = None) -> TrialResult:
    """Run one trial, writing its files through `store`; a client it had to build itself is closed after."""
    resources = resources or TrialResources()
    client, owned = resources.model_client, None
    if client is None and needs_model(spec):
        client = owned = await asyncio.to_thread(build_model_client, spec)
    pool = resources.pool or SandboxPool.for_backend(spec.sandbox, max_idle=0)
    trial = Trial(
        spec,
        store,
        task=resources.task,
        model_client=client,
        on_event=resources.on_event,
        pool=pool,
        images=resources.images,
    )
    try:
        return await trial.run()
    finally:
        if resources.pool is None:
            await asyncio.shield(pool.close())
        await close_model_client(owned)


class PackedTrial(BaseModel):
    """A trial run away from the driver: its result, and its files as an uncompressed tar."""

    result: TrialResult
    files: bytes


async def run_trial_packed(
    spec: TrialSpec, resources: TrialResources | None = None, scratch_root: Path | None = None
) -> PackedTrial:
    """Run the trial in a scratch job directory (under `scratch_root`, default the system's temp dir) and
    pack what it wrote (for a worker in another process)."""
    if scratch_root is not None:
        await asyncio.to_thread(scratch_root.mkdir, parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="evsys-trial-", dir=scratch_root) as scratch:
        store = JobStore(Path(scratch), durable=False)  # the driver writes the durable copy
        result = await run_trial(spec, store, resources)
        files = await asyncio.to_thread(_pack_dir, store.trial_dir(spec.trial_name))
    return PackedTrial(result=result, files=files)


def run_trial_sync(spec: TrialSpec | dict[str, Any]) -> PackedTrial:
    """`run_trial_packed` for a fresh process (multiprocessing, Ray): a spec (or its JSON dict) in, a packed
    trial out. Import-level function, so any pickling pool can call it."""
    if not isinstance(spec, TrialSpec):
        spec = TrialSpec.model_validate(spec)
    return asyncio.run(run_trial_packed(spec))


def _pack_dir(path: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.add(path, arcname=".", recursive=True)
    return buf.getvalue()
