"""Executors by name, and each one's options model: behaviour-free, so a job's config can validate
`executor.options` without importing any executor (and with it the trial machinery that imports the config).

`ExecutorPlugin` is the root every executor class derives from (`evsys.engine.executors.base.Executor` is
the one to subclass): it declares only the class's `name` and its `options_model`, the pydantic model of
its settings (`JobConfig.executor.options`), and validates options into it. `EXECUTORS` is the one registry
of executor classes (entry-point group `evsys.executors`); evsys's own are declared in
evsys.util.builtin_plugins, by `module:Class` path, so naming one imports nothing until it is asked for.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from evsys.util.registry import Registry

EXECUTOR_ENTRY_POINTS = "evsys.executors"
DEFAULT_EXECUTOR = "local"


class NoOptions(BaseModel):
    """The options of an executor that takes none."""

    model_config = ConfigDict(extra="forbid")


class ExecutorPlugin:
    """What the registry knows of an executor class: its name and its options model."""

    name: ClassVar[str] = ""
    options_model: ClassVar[type[BaseModel]] = NoOptions  # its settings (`JobConfig.executor.options`)

    @classmethod
    def parse_options(cls, options: BaseModel | Mapping[str, Any] | None) -> BaseModel:
        """`options` as this executor's `options_model`, validated (once: a validated model is kept)."""
        if isinstance(options, cls.options_model):
            return options
        if isinstance(options, BaseModel):
            options = options.model_dump(exclude_unset=True)
        return cls.options_model.model_validate(dict(options or {}))


def _executor_plugin(name: str, cls: object) -> type[ExecutorPlugin]:
    if not (isinstance(cls, type) and issubclass(cls, ExecutorPlugin)):
        raise TypeError(f"executor {name!r} must be an Executor subclass, got {cls!r}")
    return cls


EXECUTORS: Registry[type[ExecutorPlugin]] = Registry("executor", EXECUTOR_ENTRY_POINTS, _executor_plugin)


def executor_options_model(name: str) -> type[BaseModel]:
    """The options model of the executor registered as `name`; `UnknownNameError` (a ValueError) listing
    the known ones."""
    return EXECUTORS.get(name).options_model


def parse_executor_options(name: str, options: BaseModel | Mapping[str, Any] | None) -> BaseModel:
    """`options` validated as the options model of the executor registered as `name`."""
    return EXECUTORS.get(name).parse_options(options)
