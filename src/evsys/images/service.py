"""The front door of `evsys.images`: give me the image for this task (or this reference), built or pulled
once however many trials ask at the same time.

A task's image is keyed by content (Dockerfile, context after `.dockerignore`, base image ids, build args);
the record of a finished build (`index/<key>.json`) lets a later trial — in this process or another — use
the image without running buildah at all. One asyncio lock per key serialises the trials of this process, a
file lock (`locks/<key>.lock`) the other processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Literal, get_args

from pydantic import BaseModel, Field

from evsys.images import bases, pull
from evsys.images.build import BuildContext, buildah_bud
from evsys.images.refs import ImageRef, ImageRefError, SynthesisPlan, parse_ref, synthesis_plan
from evsys.images.storage import ImageError, LineCallback, Storage, run_tool
from evsys.images.toolimages import ToolImagePlan, synthesise_tool_image, tool_image_plan
from evsys.records import ImageSpec
from evsys.util.atomic import write_text_atomic

PullPolicy = Literal["missing", "always", "never"]
PULL_POLICIES: tuple[PullPolicy, ...] = get_args(PullPolicy)
Source = Literal["cached", "built", "pulled", "stored"]
DOCKERFILE = "environment/Dockerfile"
SMALL_CONTEXT = 64  # context entries fingerprinted on the event loop (~1 µs each); larger ones in a thread


class ImageResult(BaseModel):
    """An image ready to run, and how it came to be (recorded in the trial result)."""

    spec: ImageSpec
    source: Source = Field(description="cached: an earlier build; built/pulled now; stored: already there.")
    key: str | None = Field(None, description="The content key of a built image.")
    synthesised_bases: list[str] = Field(
        default_factory=list, description="Bases synthesised with mmdebstrap instead of pulled."
    )
    pull_error: str | None = Field(None, description="Why `docker_image` was built instead of pulled.")
    seconds: float = 0.0


class _Record(BaseModel):
    """What `index/<key>.json` remembers about a built image."""

    key: str
    tag: str
    image_id: str
    spec: ImageSpec
    synthesised_bases: list[str] = Field(default_factory=list)


Notice = Callable[[str], None]


class ImageService:
    """Builds, pulls and synthesises images into one storage; safe to share between concurrent trials."""

    def __init__(self, storage: Storage | None = None, *, pull_policy: PullPolicy = "missing") -> None:
        self.storage = storage or Storage()
        self.pull_policy = pull_policy
        self._locks: dict[str, asyncio.Lock] = {}
        self._keys: dict[tuple, tuple[int, str, str]] = {}
        self._records: dict[str, _Record] = {}

    # ---------------------------------------------------------------- locking
    @contextlib.asynccontextmanager
    async def _locked(self, key: str) -> AsyncIterator[None]:
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            locks = self.storage.home / "locks"
            locks.mkdir(parents=True, exist_ok=True)
            fd = os.open(locks / f"{_safe(key)}.lock", os.O_RDWR | os.O_CREAT, 0o644)
            try:
                await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)  # closing drops the lock

    # ---------------------------------------------------------------- references and bases
    async def ensure_ref(
        self,
        text: str,
        *,
        log: Path | None = None,
        on_line: LineCallback | None = None,
        notice: Notice | None = None,
    ) -> tuple[str, str | None]:
        """Make the image `text` present in the storage: stored, pulled or (for a well-known base that cannot
        be pulled) synthesised. Returns (name in the storage, description if synthesised)."""
        try:
            ref = parse_ref(text)
        except ImageRefError as exc:
            raise ImageError(str(exc)) from None
        name = pull.stored_name(ref)
        stored = self._usable(name, ref)
        if self.pull_policy != "always" and stored is not None:
            return name, self._synth_note(stored, ref)  # the common case: no lock, no tool
        async with self._locked(f"ref-{name}"):
            stored = self._usable(name, ref)
            if stored is not None and self.pull_policy != "always":
                return name, self._synth_note(stored, ref)
            error: pull.PullError | None = None
            if self.pull_policy != "never":
                try:
                    await pull.pull(self.storage, ref, log=log, on_line=on_line)
                    return name, None
                except pull.PullError as exc:
                    if exc.kind in ("auth", "missing") and ref.registry != "docker.io":
                        raise
                    error = exc
            if stored is not None:  # --pull always, registry unreachable: the stored copy will do
                return name, self._synth_note(stored, ref)
            tool_plan = tool_image_plan(ref)
            if tool_plan is not None:
                return name, await self._synthesise_tool(name, ref, tool_plan, log, on_line, notice)
            plan = synthesis_plan(ref)
            if plan is None:
                why = str(error) if error else f"image {ref} is not stored and --pull never forbids pulling"
                raise ImageError(f"{why}; evsys can synthesise only debian, ubuntu and python bases and uv")
            if notice is not None:
                notice(f"{ref} cannot be pulled: synthesising it from package mirrors ({plan.describe()})")
            distro = str(parse_ref(f"{plan.distribution}:{plan.suite}"))
            if plan.python:  # python:3.X = its distribution's base + python3, built like any image
                await self.ensure_ref(distro, log=log, on_line=on_line, notice=notice)
                await self._build_python(name, plan, distro, log=log, on_line=on_line)
            elif distro != name:  # debian:12-slim, debian:bookworm-slim...: one synthesis of debian:bookworm
                await self.ensure_ref(distro, log=log, on_line=on_line, notice=notice)
                await self._tag(distro, name)
            else:
                await bases.synthesise(self.storage, name, plan, log=log, on_line=on_line)
            record = self.storage.find(name)
            marker = self._synth_path(record["id"]) if record is not None else None
            if marker is not None and (not marker.exists() or distro == name or plan.python):
                recipe = bases.recipe(plan)
                version = bases.RECIPE_VERSION[recipe]
                write_text_atomic(marker, f"{recipe}|{version}|{plan.describe()}")
            return name, plan.describe()

    async def _synthesise_tool(
        self,
        name: str,
        ref: ImageRef,
        plan: ToolImagePlan,
        log: Path | None,
        on_line: LineCallback | None,
        notice: Notice | None,
    ) -> str:
        """Synthesise a tool image from its package (evsys.images.toolimages); its description."""
        if notice is not None:
            notice(f"{ref} cannot be pulled: synthesising it from the package index ({plan.describe()})")
        await synthesise_tool_image(self.storage, name, plan, log=log, on_line=on_line)
        record = self.storage.find(name)
        if record is not None:
            marker = self._synth_path(record["id"])
            write_text_atomic(marker, f"tool|{bases.RECIPE_VERSION['tool']}|{plan.describe()}")
        return plan.describe()

    def _usable(self, name: str, ref: ImageRef | None = None) -> dict | None:
        """The stored image `name`, unless evsys synthesised it with an older recipe or (for `ref`) with
        another recipe than the one for `ref` now (python:3.13-slim-bookworm once made from trixie)."""
        record = self.storage.find(name)
        if record is None:
            return None
        try:
            marker = self._synth_path(record["id"]).read_text()
        except OSError:
            return record
        fields = marker.split("|")  # "<recipe>|<recipe version>|<description>"; older: the description
        recipe, version = (fields[0], fields[1]) if len(fields) == 3 else (marker.split()[0], "1")
        plan = synthesis_plan(ref) if ref is not None else None
        if plan is not None and bases.recipe(plan) != recipe:
            return None
        return record if str(bases.RECIPE_VERSION.get(recipe, 1)) == version else None

    async def _tag(self, source: str, name: str) -> None:
        done = await run_tool(self.storage.buildah("tag", source, name), timeout=120)
        if done.returncode != 0:
            raise ImageError(f"buildah tag {source} {name} failed: {done.output.strip()[-300:]}")

    async def _build_python(
        self, name: str, plan: SynthesisPlan, distro: str, *, log: Path | None, on_line: LineCallback | None
    ) -> None:
        """Build `python:3.X` on top of its synthesised distribution base, stored as `name`. A Python
        compiled from source is built once per (version, release, recipe), then tagged with each name."""
        if not plan.python_source:
            await self._bud(bases.python_dockerfile(distro, plan), name, log=log, on_line=on_line)
            return
        version = bases.RECIPE_VERSION["python-source"]
        compiled = f"localhost/evsys/synth/python:{plan.python}-{plan.suite}-r{version}"
        async with self._locked(f"ref-{_safe(compiled)}"):
            if self.storage.find(compiled) is None:
                dockerfile = bases.source_python_dockerfile(distro, plan)
                files = bases.source_context(plan)
                await self._bud(dockerfile, compiled, files=files, log=log, on_line=on_line)
        await self._tag(compiled, name)

    async def _bud(
        self,
        dockerfile: str,
        name: str,
        *,
        files: dict[str, Path] | None = None,
        log: Path | None,
        on_line: LineCallback | None,
    ) -> None:
        """Build a Dockerfile made by evsys (a synthesised base), with `files` copied into its context, into
        the storage as `name`."""
        with tempfile.TemporaryDirectory(prefix="python-base-", dir=self.storage.home) as tmp:
            (Path(tmp) / "Dockerfile").write_text(dockerfile)
            for file_name, source in (files or {}).items():
                shutil.copyfile(source, Path(tmp) / file_name)
            await buildah_bud(
                self.storage,
                BuildContext(Path(tmp) / "Dockerfile", Path(tmp)),
                name,
                timeout=bases.SYNTH_TIMEOUT,
                log=log,
                on_line=on_line,
            )

    def _synth_path(self, image_id: str) -> Path:
        return self.storage.home / "synthesised" / image_id

    def _synth_note(self, record: dict, ref: ImageRef | None = None) -> str | None:
        """What a stored image was synthesised as (for `ref`, the plan of that reference: its own notes), or
        None when it was pulled or built."""
        try:
            text = self._synth_path(record["id"]).read_text().split("|")[-1]
        except OSError:
            return None
        plan = synthesis_plan(ref) if ref is not None else None
        return plan.describe() if plan is not None else text

    # ---------------------------------------------------------------- task images
    async def task_image(
        self,
        task_dir: Path,
        *,
        docker_image: str | None = None,
        build_timeout: float = 600.0,
        name: str = "task",
        log: Path | None = None,
        on_line: LineCallback | None = None,
        notice: Notice | None = None,
    ) -> ImageResult:
        """The image a task directory runs on: its `docker_image` (pulled, or built from its Dockerfile when
        the pull fails), else its `environment/Dockerfile` built."""
        t0 = time.perf_counter()
        dockerfile = Path(task_dir) / DOCKERFILE
        pull_error = None
        if docker_image:
            try:
                stored, synth = await self.ensure_ref(docker_image, log=log, on_line=on_line, notice=notice)
                spec = await self.storage.spec(stored)
                return ImageResult(
                    spec=spec,
                    source="pulled" if not synth else "stored",
                    synthesised_bases=[f"{docker_image} ({synth})"] if synth else [],
                    seconds=time.perf_counter() - t0,
                )
            except ImageError as exc:
                if not dockerfile.is_file():
                    raise ImageError(f"task.toml:environment.docker_image: {exc}") from None
                pull_error = str(exc)
                if notice is not None:
                    notice(f"{docker_image} cannot be pulled; building {DOCKERFILE} instead")
        if not dockerfile.is_file():
            raise ImageError(f"{task_dir}: no {DOCKERFILE} and no [environment] docker_image")
        result = await self.build(
            BuildContext(dockerfile, dockerfile.parent),
            name=name,
            timeout=build_timeout,
            log=log,
            on_line=on_line,
            notice=notice,
        )
        result.pull_error = pull_error
        result.seconds = time.perf_counter() - t0
        return result

    async def build(
        self,
        ctx: BuildContext,
        *,
        name: str = "task",
        timeout: float = 600.0,  # noqa: ASYNC109 - the build's limit
        log: Path | None = None,
        on_line: LineCallback | None = None,
        notice: Notice | None = None,
    ) -> ImageResult:
        """Build `ctx` once (by content key) and return its image."""
        synthesised, base_ids = [], []
        for base in ctx.bases():
            try:
                stored, synth = await self.ensure_ref(base, log=log, on_line=on_line, notice=notice)
            except ImageError as exc:
                raise ImageError(f"{ctx.dockerfile}: FROM {base}: {exc}") from None
            record = self.storage.find(stored)
            base_ids.append(record["id"] if record else stored)
            if "@" in base:  # stored under a tag: the build must name it so
                ctx.stored_as[base] = stored
            if synth:
                synthesised.append(f"{base} ({synth})")
        key = await self._key(ctx, base_ids)
        cached = self._cached(key)
        if cached is not None:  # built before: no lock needed to use it
            return ImageResult(spec=cached.spec, source="cached", key=key, synthesised_bases=synthesised)
        async with self._locked(f"build-{key[:32]}"):
            cached = self._cached(key)
            if cached is not None:
                return ImageResult(spec=cached.spec, source="cached", key=key, synthesised_bases=synthesised)
            tag = f"localhost/evsys/{_safe(name).lower()}:{key[:16]}"
            await buildah_bud(self.storage, ctx, tag, timeout=timeout, log=log, on_line=on_line)
            record = self.storage.find(tag)
            if record is None:
                raise ImageError(f"buildah reported success but {tag} is not in {self.storage.root}")
            spec = await self.storage.spec(tag)
            self._remember(_Record(key=key, tag=tag, image_id=record["id"], spec=spec))
        return ImageResult(spec=spec, source="built", key=key, synthesised_bases=synthesised)

    async def _key(self, ctx: BuildContext, base_ids: list[str]) -> str:
        """The content key of `ctx`, remembered with a stat fingerprint of its context so that the trials of
        a task hash its files once; small contexts are fingerprinted inline (cheaper than a thread hop)."""
        memo_id = (str(ctx.dockerfile), tuple(sorted(ctx.build_args.items())), tuple(base_ids))
        known = self._keys.get(memo_id)
        if known is not None and known[0] <= SMALL_CONTEXT:
            fingerprint = ctx.fingerprint()
        else:
            fingerprint = await asyncio.to_thread(ctx.fingerprint)
        if known is not None and known[1] == fingerprint[1]:
            return known[2]
        key = await asyncio.to_thread(ctx.key, base_ids)
        self._keys[memo_id] = (fingerprint[0], fingerprint[1], key)
        return key

    def _cached(self, key: str) -> _Record | None:
        record = self._records.get(key)
        if record is None:
            path = self.storage.home / "index" / f"{key}.json"
            try:
                record = _Record.model_validate_json(path.read_text())
            except (OSError, ValueError):
                return None
            self._records[key] = record
        if self.storage.find(record.image_id) is None or not all(
            p.exists() for p in record.spec.rootfs_layers
        ):
            return None  # pruned since
        if record.spec.source is None:  # recorded before specs named their source: daemons copy from it
            record.spec = record.spec.model_copy(update={"source": self.storage.transport(record.tag)})
        return record

    def _remember(self, record: _Record) -> None:
        write_text_atomic(
            self.storage.home / "index" / f"{record.key}.json", record.model_dump_json(indent=1)
        )


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.")[:100] or "image"
