"""`evsys datasets list|download` and `evsys run -d NAME@VERSION`: datasets by name from a Harbor-format
registry (`--registry-path FILE` or `--registry-url URL`, Harbor's public registry by default), fetched once
into the local cache and used offline after that."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from evsys.cli.checks import console, fail
from evsys.cli.markup import shown

if TYPE_CHECKING:
    from evsys.datasets import Registry, RegistryTask

datasets_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None)

RegistryPath = Annotated[
    Path | None,
    typer.Option("--registry-path", help="A local registry.json (Harbor's format) to find dataset names in."),
]
RegistryUrl = Annotated[
    str | None,
    typer.Option("--registry-url", help="A registry.json URL (default: Harbor's public registry)."),
]


def _registry(path: Path | None, url: str | None) -> Registry:
    from evsys.datasets import RegistryError, load_registry

    try:
        return asyncio.run(load_registry(path, url))
    except RegistryError as exc:
        raise fail(str(exc)) from None


def _announce(task: RegistryTask, index: int, total: int) -> None:
    where = f"{task.git_url} {(task.git_commit_id or 'HEAD')[:12]}" if task.git_url else task.path
    console.print(f"  [{index + 1}/{total}] {shown(task.name)} from {shown(where)}", highlight=False)


def fetch_dataset(registry: Registry, reference: str, *, force: bool = False) -> Path:
    """The local directory of dataset `reference` (`NAME[@VERSION]`), fetched unless cached; a usage error
    naming what went wrong."""
    from evsys.datasets import DatasetCache, RegistryError

    cache = DatasetCache()
    try:
        dataset = registry.find(reference)
        if not force and (hit := cache.cached(dataset)) is not None:
            return hit
        console.print(f"fetching {dataset.label} ({len(dataset.tasks)} tasks)", highlight=False)
        base = None if "://" in registry.source else Path(registry.source).parent
        return asyncio.run(
            cache.download(dataset, registry=registry.source, base=base, force=force, on_task=_announce)
        )
    except RegistryError as exc:
        raise fail(str(exc)) from None


def dataset_paths(references: list[str], path: Path | None, url: str | None) -> list[Path]:
    """`evsys run -d`: the local directories of the named datasets (one registry read for all)."""
    if not references:
        if path is not None or url is not None:
            raise fail("--registry-path/--registry-url need -d/--dataset NAME@VERSION")
        return []
    registry = _registry(path, url)
    return [fetch_dataset(registry, reference) for reference in references]


@datasets_app.command("list")
def list_datasets(registry_path: RegistryPath = None, registry_url: RegistryUrl = None) -> None:
    """List the datasets a registry names: name, version, tasks, whether a copy is cached, description."""
    from evsys.datasets import DatasetCache

    registry = _registry(registry_path, registry_url)
    cache = DatasetCache()
    table = Table(title=shown(registry.source))
    table.add_column("dataset", no_wrap=True)
    for header in ("tasks", "cached", "description"):
        table.add_column(header)
    for dataset in sorted(registry.datasets, key=lambda d: (d.name, d.version)):
        cached = "yes" if cache.cached(dataset) is not None else "-"
        table.add_row(shown(dataset.label), str(len(dataset.tasks)), cached, shown(dataset.description[:80]))
    console.print(table)


@datasets_app.command("download")
def download(
    names: Annotated[list[str], typer.Argument(help="NAME@VERSION (or NAME: its newest version).")],
    registry_path: RegistryPath = None,
    registry_url: RegistryUrl = None,
    force: Annotated[bool, typer.Option("--force", help="Fetch again even when a copy is cached.")] = False,
) -> None:
    """Fetch datasets into the local cache (pinned commits, verified) and print their directories."""
    registry = _registry(registry_path, registry_url)
    for name in names:
        typer.echo(fetch_dataset(registry, name, force=force))


@datasets_app.command("show")
def show(
    path: Annotated[Path, typer.Argument(help="A Python-task dataset directory (with its dataset.toml).")],
) -> None:
    """Show a Python dataset: its name, version, description, tasks and references."""
    from evsys.cli.checks import import_from_current_directory
    from evsys.task.harbor_dataset import DatasetManifestError
    from evsys.task.python import (
        PythonTaskLoadError,
        is_python_dataset,
        load_python_tasks,
        read_dataset_config,
    )

    try:
        if not is_python_dataset(path):
            raise fail(f"{path} is not a Python-task dataset (no dataset.toml with `[dataset] data`)")
        import_from_current_directory()
        manifest = read_dataset_config(path)
        tasks = load_python_tasks(path)
    except (DatasetManifestError, PythonTaskLoadError, OSError) as exc:
        raise fail(str(exc)) from None
    with_reference = sum(task.reference_answer is not None for task in tasks)
    rows = {
        "name": manifest.name or path.resolve().name,
        "version": manifest.version or "-",
        "description": manifest.description or "-",
        "data": manifest.data,
        "tasks": str(len(tasks)),
        "verifier": manifest.verifier or "per row",
        "reference": f"{manifest.reference or '-'} ({with_reference} of {len(tasks)} tasks have one)",
    }
    out = Console(highlight=False, soft_wrap=True)
    for key, value in rows.items():
        out.print(f"{key:<12}{shown(value)}")
