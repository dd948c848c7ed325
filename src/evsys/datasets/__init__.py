"""Datasets by name: Harbor-format registries (`registry.json`) and the local cache of the task directories
they pin to git commits. `evsys run -d NAME@VERSION` and `evsys datasets list|download` use this package."""

from evsys.datasets.cache import DatasetCache, DatasetRecord, FetchedTask
from evsys.datasets.registry import (
    DEFAULT_REGISTRY_URL,
    Registry,
    RegistryDataset,
    RegistryError,
    RegistryTask,
    load_registry,
)
from evsys.datasets.resolve import dataset_dir, looks_like_dataset_reference

__all__ = [
    "DEFAULT_REGISTRY_URL",
    "DatasetCache",
    "DatasetRecord",
    "FetchedTask",
    "Registry",
    "RegistryDataset",
    "RegistryError",
    "RegistryTask",
    "dataset_dir",
    "load_registry",
    "looks_like_dataset_reference",
]
