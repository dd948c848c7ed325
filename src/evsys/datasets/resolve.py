"""A dataset by name (`NAME@VERSION`, or `NAME` for its newest version) as a local directory: the registry
read (a local file, a URL, or Harbor's public registry), the dataset fetched into the cache unless a matching
copy is there. What `evsys run -d` and `run_rollouts("NAME@VERSION")` share."""

from __future__ import annotations

import re
from pathlib import Path

from evsys.datasets.cache import DatasetCache, OnTask
from evsys.datasets.registry import load_registry

# `name@version` or `org/name@version`: no spaces, one `@`, not a path on disk
_REFERENCE = re.compile(r"^[A-Za-z0-9][\w.\-/]*@[\w.\-]+$")


def looks_like_dataset_reference(text: str) -> bool:
    """True for `NAME@VERSION` (the form `evsys run -d` takes); a bare `NAME` is not taken for one."""
    return bool(_REFERENCE.match(text))


async def dataset_dir(
    reference: str,
    *,
    registry_path: Path | str | None = None,
    registry_url: str | None = None,
    force: bool = False,
    on_task: OnTask | None = None,
) -> Path:
    """The local directory of dataset `reference`, fetched unless cached; `RegistryError` naming what went
    wrong (an unknown name lists the registry's datasets, an unknown version its versions)."""
    registry = await load_registry(registry_path, registry_url)
    dataset = registry.find(reference)
    cache = DatasetCache()
    if not force and (hit := cache.cached(dataset)) is not None:
        return hit
    base = None if "://" in registry.source else Path(registry.source).parent
    return await cache.download(dataset, registry=registry.source, base=base, force=force, on_task=on_task)
