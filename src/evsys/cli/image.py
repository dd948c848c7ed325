"""`evsys image build|ls|inspect|prune`: task environment images in evsys's image cache (docs/images.md)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:
    from evsys.task.models import Task

image_app = typer.Typer(no_args_is_help=True)
console = Console(stderr=True)
out = Console()


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _fail(message: str) -> typer.Exit:
    console.print(f"[red]error[/]: {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(1)


@image_app.command("build")
def build(
    paths: Annotated[list[Path], typer.Argument(help="Task directories or datasets.")],
    pull: Annotated[str, typer.Option("--pull", help="missing | always | never")] = "missing",
    log_dir: Annotated[
        Path | None, typer.Option("--log-dir", help="Keep each task's build log here (<task>.log).")
    ] = None,
) -> None:
    """Build (or pull) the image of every task that runs on one, ahead of a run."""
    from evsys.images import ImageError, ImageService
    from evsys.images.service import PULL_POLICIES
    from evsys.task.loader import DatasetNotFoundError, load_tasks
    from evsys.util.literals import is_one_of

    if not is_one_of(pull, PULL_POLICIES):
        raise _fail(f"--pull must be missing, always or never, not {pull!r}")
    tasks = []
    try:
        for path in paths:
            tasks += load_tasks(path).tasks
    except DatasetNotFoundError as exc:
        raise _fail(str(exc)) from None
    service = ImageService(pull_policy=pull)
    table = Table("task", "image", "source", "seconds")
    failed = 0

    async def one(task: Task) -> None:
        nonlocal failed
        if not task.environment.needs_image:
            table.add_row(task.name, "-", "host rootfs (nothing to build)", "-")
            return
        log = (log_dir / f"{task.name}.log") if log_dir else None
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
        status = console.status(f"{task.name}: starting")
        t0 = time.perf_counter()
        with status:
            try:
                result = await service.task_image(
                    task.path,
                    docker_image=task.config.environment.docker_image,
                    build_timeout=task.config.environment.build_timeout_sec,
                    name=task.name,
                    log=log,
                    on_line=lambda line: status.update(f"{escape(task.name)}: {escape(line[:100])}"),
                    notice=lambda text: console.print(f"[yellow]notice[/]: {escape(text)}"),
                )
            except ImageError as exc:
                failed += 1
                console.print(f"[red]{escape(task.name)}[/]: {escape(str(exc))}", soft_wrap=True)
                table.add_row(task.name, "-", "[red]failed[/]", f"{time.perf_counter() - t0:.2f}")
                return
        source = result.source + (" (synthesised base)" if result.synthesised_bases else "")
        table.add_row(task.name, result.spec.ref, source, f"{time.perf_counter() - t0:.2f}")

    async def all_tasks() -> None:
        for task in tasks:  # one at a time: builds are CPU- and disk-heavy
            await one(task)

    asyncio.run(all_tasks())
    out.print(table)
    if failed:
        raise typer.Exit(1)


@image_app.command("ls")
def ls(as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False) -> None:
    """List the images in evsys's image cache with their sizes, and the disk used in total."""
    from evsys.images.inventory import inventory

    inv = inventory()
    if as_json:
        out.print_json(json.dumps(inv))
        return
    table = Table("image", "id", "layers", "size", "note")
    for image in inv["images"]:
        table.add_row(
            "\n".join(image["names"]) or "<none>",
            image["id"][:12],
            str(image["layers"]),
            _size(image["size"]),
            image["note"] or "",
        )
    out.print(table)
    out.print(f"{len(inv['images'])} images, {_size(inv['disk'])} on disk under {inv['root']}")


@image_app.command("inspect")
def inspect(target: Annotated[str, typer.Argument(help="A task directory or an image name.")]) -> None:
    """Show an image's layers and config (for a task directory: the image its last build made)."""
    from evsys.images import ImageError
    from evsys.images.inventory import describe

    try:
        out.print_json(json.dumps(asyncio.run(describe(target)), default=str))
    except ImageError as exc:
        raise _fail(str(exc)) from None


@image_app.command("prune")
def prune(
    everything: Annotated[
        bool, typer.Option("--all", help="Remove every image, synthesised bases included.")
    ] = False,
) -> None:
    """Remove images nothing refers to (or every image with --all) and free their disk space."""
    from evsys.images import ImageError
    from evsys.images.inventory import prune as do_prune

    try:
        before, after = asyncio.run(do_prune(everything=everything))
    except ImageError as exc:
        raise _fail(str(exc)) from None
    out.print(f"freed {_size(max(before - after, 0))} ({_size(after)} left)")
