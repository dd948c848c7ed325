"""Dataset registries in Harbor's format: a JSON list of datasets, each version a set of tasks pinned to a git
repository, a commit and a path inside it.

```json
[{"name": "terminal-bench", "version": "2.0", "description": "...",
  "tasks": [{"name": "hello-world", "git_url": "https://github.com/...git",
             "git_commit_id": "4f5c...", "path": "hello-world"}]}]
```

A registry is read from a file (`--registry-path`) or a URL (`--registry-url`, Harbor's public registry by
default). `NAME@VERSION` picks one version; a bare `NAME` picks `head` if there is one, else the highest
version (PEP 440), else the lexically last - the order Harbor uses.
"""

from __future__ import annotations

import json
from pathlib import Path

from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from evsys.util.hostca import host_ca_bundle

DEFAULT_REGISTRY_URL = "https://raw.githubusercontent.com/laude-institute/harbor/main/registry.json"
"""Harbor's public registry, the default source of dataset names."""
MAX_REGISTRY_BYTES = 64 * 1024 * 1024
FETCH_TIMEOUT_SEC = 30.0


class RegistryError(ValueError):
    """A registry that cannot be read, or a dataset name it does not have."""


class RegistryTask(BaseModel):
    """One task of a dataset version: where its directory lives (a git repository, commit and path)."""

    model_config = ConfigDict(extra="allow")

    name: str
    git_url: str | None = None
    git_commit_id: str | None = Field(None, description="The pinned commit; None follows the default branch.")
    path: str = Field(
        description="The task directory inside the repository (or a local path without git_url)."
    )

    @field_validator("name")
    @classmethod
    def _plain_name(cls, value: str) -> str:
        if not value or value in (".", "..") or "/" in value or "\\" in value or "\x00" in value:
            raise ValueError(f"task name {value!r} must be one path component")
        return value


class RegistryDataset(BaseModel):
    """One version of a dataset: its name, version, description and tasks."""

    model_config = ConfigDict(extra="allow")

    name: str
    version: str
    description: str = ""
    tasks: list[RegistryTask] = Field(default_factory=list)

    @property
    def label(self) -> str:
        """`name@version`."""
        return f"{self.name}@{self.version}"


_DATASETS = TypeAdapter(list[RegistryDataset])


class Registry(BaseModel):
    """The datasets a registry file or URL lists, and where it came from."""

    source: str
    datasets: list[RegistryDataset]

    def versions(self, name: str) -> list[str]:
        """Every version of dataset `name` the registry lists."""
        return [d.version for d in self.datasets if d.name == name]

    def find(self, reference: str) -> RegistryDataset:
        """The dataset `NAME@VERSION` (or `NAME`: its newest version); RegistryError listing what there is."""
        name, _, version = reference.partition("@")
        versions = self.versions(name)
        if not versions:
            known = ", ".join(sorted({d.name for d in self.datasets})[:20]) or "none"
            raise RegistryError(f"no dataset {name!r} in {self.source} (datasets: {known})")
        version = version or newest_version(versions)
        for dataset in self.datasets:
            if dataset.name == name and dataset.version == version:
                return dataset
        raise RegistryError(
            f"{name} has no version {version!r} in {self.source} (versions: {', '.join(versions)})"
        )


def newest_version(versions: list[str]) -> str:
    """`head` if listed, else the highest PEP 440 version, else the lexically last."""
    if "head" in versions:
        return "head"
    parsed = []
    for text in versions:
        try:
            parsed.append((Version(text), text))
        except InvalidVersion:
            continue
    return max(parsed)[1] if parsed else sorted(versions)[-1]


def parse_registry(text: str | bytes, source: str) -> Registry:
    """A registry from its JSON text; RegistryError naming the source and the bad field."""
    try:
        raw = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RegistryError(f"{source}: not JSON: {exc}") from None
    try:
        return Registry(source=source, datasets=_DATASETS.validate_python(raw))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(map(str, first["loc"]))
        raise RegistryError(f"{source}: {where}: {first['msg']}") from None


def read_registry_file(path: Path | str) -> Registry:
    """A registry from a local JSON file."""
    path = Path(path).expanduser()
    try:
        return parse_registry(path.read_bytes(), str(path))
    except OSError as exc:
        raise RegistryError(f"cannot read registry {path}: {exc.strerror or exc}") from None


async def fetch_registry(url: str) -> Registry:
    """A registry from a URL (bounded in size), trusting the host's CA bundle (a TLS proxy's too)."""
    import httpx

    bundle = host_ca_bundle()
    try:
        async with httpx.AsyncClient(
            timeout=FETCH_TIMEOUT_SEC, follow_redirects=True, verify=str(bundle) if bundle else True
        ) as client:
            async with client.stream("GET", url) as response:
                response.raise_for_status()
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_REGISTRY_BYTES:
                        raise RegistryError(f"{url}: registry larger than {MAX_REGISTRY_BYTES} bytes")
    except httpx.HTTPError as exc:
        raise RegistryError(
            f"cannot fetch registry {url}: {exc} (give a local file with --registry-path)"
        ) from None
    return parse_registry(bytes(body), url)


async def load_registry(path: Path | str | None = None, url: str | None = None) -> Registry:
    """The registry from `path`, else from `url`, else Harbor's public registry."""
    if path is not None and url is not None:
        raise RegistryError("give --registry-path or --registry-url, not both")
    if path is not None:
        return read_registry_file(path)
    return await fetch_registry(url or DEFAULT_REGISTRY_URL)
