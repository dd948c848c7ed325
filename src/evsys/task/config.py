"""Parse `task.toml`: TOML syntax, legacy keys, unknown keys and type errors, each reported as a `Problem`.

Legacy forms still seen in the wild map to the schema 1.4 keys of `[environment]`:
`memory = "4G"` → `memory_mb = 4096`, `storage = "10G"` → `storage_mb = 10240`, `allow_internet = true` →
`network_mode = "public"` (`false` → `"no-network"`). Sizes take a K, M, G or T suffix (powers of 1024,
with or without a trailing "B", any case); a plain number is megabytes. Giving both the legacy and the new key
is fine when they agree and an error when they do not.
"""

from __future__ import annotations

import math
import re
import tomllib
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from evsys.task import harbor_keys
from evsys.task.models import Problem, TaskConfig

TOML = "task.toml"
FREE_FORM = {
    "metadata",
    "environment.env",
    "verifier.env",
    "solution.env",
    "steps.min_reward",
    "steps.verifier.env",
}
POSITIVE = {
    "verifier.timeout_sec",
    "agent.timeout_sec",
    "agent.setup_timeout_sec",
    "environment.build_timeout_sec",
    "environment.cpus",
    "environment.memory_mb",
    "environment.storage_mb",
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)
_UNIT_MB = {"": 1, "k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}
_LEGACY = {"memory": "memory_mb", "storage": "storage_mb"}


def parse_size_mb(value: Any) -> int:
    """Convert a size like "4G", "512MB", "2048" or 1024 to whole megabytes (ValueError if not a size)."""
    if isinstance(value, bool):
        raise ValueError(f"expected a size like '4G' or a number of MB, got {value!r}")
    if isinstance(value, int | float):
        if value <= 0 or not math.isfinite(value):
            raise ValueError(f"expected a positive size, got {value!r}")
        return math.ceil(value)
    match = _SIZE.match(str(value))
    if not match:
        raise ValueError(f"expected a size like '4G' or a number of MB, got {value!r}")
    megabytes = float(match.group(1)) * _UNIT_MB[match.group(2).lower()]
    if megabytes <= 0:
        raise ValueError(f"expected a positive size, got {value!r}")
    return math.ceil(megabytes)


def _map_legacy(env: dict[str, Any], problems: list[Problem]) -> None:
    """Rewrite legacy `[environment]` keys into their schema 1.4 form, in place."""
    for old, new in _LEGACY.items():
        if old not in env:
            continue
        field = f"environment.{old}"
        try:
            mapped = parse_size_mb(env.pop(old))
        except ValueError as exc:
            problems.append(Problem(file=TOML, field=field, message=str(exc)))
            continue
        if new in env and env[new] != mapped:
            message = f"{mapped} MB disagrees with environment.{new} = {env[new]!r}; give only one of them"
            problems.append(Problem(file=TOML, field=field, message=message))
            continue
        env[new] = mapped
    if "allow_internet" in env:
        allow = env.pop("allow_internet")
        if not isinstance(allow, bool):
            problems.append(
                Problem(
                    file=TOML,
                    field="environment.allow_internet",
                    message=f"expected true or false, got {allow!r}",
                )
            )
            return
        mode = "public" if allow else "no-network"
        if "network_mode" in env and env["network_mode"] != mode:
            message = (
                f"{str(allow).lower()} disagrees with environment.network_mode = {env['network_mode']!r}"
            )
            problems.append(Problem(file=TOML, field="environment.allow_internet", message=message))
            return
        env["network_mode"] = mode


def _unknown_keys(
    data: dict[str, Any],
    model: type[BaseModel] | None,
    prefix: str,
    problems: list[Problem],
    harbor: harbor_keys.KeyTree | None = harbor_keys.HARBOR_KEYS,
) -> None:
    """Report keys evsys and Harbor do not define (a typo, with the closest known key) and Harbor keys evsys
    does not apply yet; descriptive Harbor keys pass silently. Every key is kept on the config."""
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if dotted in FREE_FORM:
            continue
        field = model.model_fields.get(key) if model is not None else None
        in_harbor = harbor is not None and key in harbor
        if field is None and not in_harbor:
            problems.append(_unknown_key_problem(key, dotted, value, model, harbor))
            continue
        reason = None if field is not None else harbor_keys.not_applied_reason(dotted)
        if reason is not None:
            message = f"Harbor's key for {reason}: evsys does not apply it yet (the task runs without it)"
            problems.append(Problem(file=TOML, field=dotted, message=message, severity="warning"))
            continue
        sub_model = _table_model(field)
        sub_harbor = harbor.get(key) if harbor is not None else None
        for table in _tables(value):
            _unknown_keys(table, sub_model, f"{dotted}.", problems, sub_harbor)


UNKNOWN_KEY_PREFIXES = ("unknown key", "unknown section")  # what `evsys tasks check --strict` makes errors


def _unknown_key_problem(
    key: str, dotted: str, value: Any, model: type[BaseModel] | None, harbor: harbor_keys.KeyTree | None
) -> Problem:
    known = [*(model.model_fields if model is not None else ()), *(harbor or ())]
    kind = "section" if isinstance(value, dict) else "key"
    message = f"unknown {kind} (kept, but neither evsys nor Harbor uses it)"
    guess = harbor_keys.suggest(key, known)
    if guess is not None:
        message += f"; did you mean '{prefix_of(dotted)}{guess}'?"
    return Problem(file=TOML, field=dotted, message=message, severity="warning")


def prefix_of(dotted: str) -> str:
    """`a.b.` for `a.b.c`; empty for a top-level key."""
    head, _, _ = dotted.rpartition(".")
    return f"{head}." if head else ""


def _table_model(field: Any) -> type[BaseModel] | None:
    sub = field.annotation if field is not None else None
    return sub if isinstance(sub, type) and issubclass(sub, BaseModel) else None


def _tables(value: Any) -> list[dict[str, Any]]:
    """The tables to check below a key: the table itself, or each table of an array of tables."""
    if isinstance(value, dict):
        return [value]
    if isinstance(value, list):
        return [item for item in value if isinstance(item, dict)]
    return []


def _describe(value: Any) -> str:
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "a list"
    return repr(value)


_EXPECTED = {
    "float": "a number",
    "int": "a whole number",
    "bool": "true or false",
    "string": "a string",
    "dict": "a table",
    "list": "a list",
    "model": "a table",
}


def type_error_message(error: ErrorDetails) -> str:
    """Turn one pydantic error into `expected ..., got ...` wording for users who edit TOML."""
    kind = error["type"]
    got = _describe(error.get("input"))
    if kind == "literal_error":
        return f"expected one of {error.get('ctx', {}).get('expected', '')}, got {got}"
    for prefix, expected in _EXPECTED.items():
        if kind.startswith(prefix):
            return f"expected {expected}, got {got}"
    return f"{error['msg']}, got {got}"


def _validation_problems(exc: ValidationError) -> list[Problem]:
    problems = []
    for error in exc.errors():
        loc = [str(part) for part in error["loc"] if not str(part).startswith(("function-", "union["))]
        problems.append(Problem(file=TOML, field=".".join(loc) or None, message=type_error_message(error)))
    return problems


def _positive_problems(config: TaskConfig) -> list[Problem]:
    problems = []
    for dotted in sorted(POSITIVE):
        section, key = dotted.split(".")
        value = getattr(getattr(config, section), key)
        if value is not None and (value <= 0 or not math.isfinite(value)):
            problems.append(
                Problem(file=TOML, field=dotted, message=f"must be a positive number, got {value!r}")
            )
    if config.environment.gpus < 0:
        problems.append(Problem(file=TOML, field="environment.gpus", message="must not be negative"))
    return problems


def _network_problems(config: TaskConfig) -> list[Problem]:
    """`allowed_hosts` only with `network_mode = "allowlist"` (Harbor refuses it otherwise); a phase's
    `allowed_hosts` needs the phase's own `network_mode`."""
    problems = []
    for name in ("environment", "agent", "verifier"):
        section = getattr(config, name)
        if section.allowed_hosts and section.network_mode != "allowlist":
            message = (
                f'is only valid with {name}.network_mode = "allowlist" '
                f"(it is {section.network_mode or 'unset'})"
            )
            problems.append(Problem(file=TOML, field=f"{name}.allowed_hosts", message=message))
    return problems


def _artifact_problems(config: TaskConfig) -> list[Problem]:
    """Artifact sources are absolute sandbox paths without `..`; destinations stay inside artifacts/."""
    problems = []
    for index, entry in enumerate(config.artifacts):
        source = entry if isinstance(entry, str) else entry.source
        destination = None if isinstance(entry, str) else entry.destination
        field = f"artifacts[{index}]"
        if not source.startswith("/") or ".." in PurePosixPath(source).parts:
            message = f"source {source!r} must be an absolute path without '..'"
            problems.append(Problem(file=TOML, field=field, message=message))
        if destination is not None and (
            destination.startswith("/") or ".." in PurePosixPath(destination).parts or not destination.strip()
        ):
            message = f"destination {destination!r} must be a relative path without '..'"
            problems.append(Problem(file=TOML, field=field, message=message))
    return problems


def read_toml(path: Path, problems: list[Problem]) -> dict[str, Any] | None:
    """Read a TOML file; a syntax error becomes a `task.toml:<line>` problem and None is returned."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(Problem(file=TOML, message=f"cannot be read: {exc}"))
        return None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        match = re.search(r"\(at line (\d+), column \d+\)", str(exc))
        message = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(exc)) or "invalid TOML"
        problems.append(
            Problem(file=TOML, field=match.group(1) if match else None, message=f"syntax error: {message}")
        )
        return None


def parse_task_toml(path: Path, problems: list[Problem]) -> TaskConfig | None:
    """Parse `task.toml` into a TaskConfig, appending every problem found; None when it cannot be used at all.

    A missing file yields the default config and a warning.
    """
    if not path.is_file():
        problems.append(Problem(file=TOML, message="missing; using the defaults", severity="warning"))
        return TaskConfig()
    data = read_toml(path, problems)
    if data is None:
        return None
    env = data.get("environment")
    if isinstance(env, dict):
        _map_legacy(env, problems)
    if "version" in data and "schema_version" not in data:  # the older spelling, as Harbor reads it
        data["schema_version"] = str(data.pop("version"))
    _unknown_keys(data, TaskConfig, "", problems)
    try:
        config = TaskConfig.model_validate(data)
    except ValidationError as exc:
        problems.extend(_validation_problems(exc))
        return None
    problems.extend(_positive_problems(config))
    problems.extend(_network_problems(config))
    problems.extend(_artifact_problems(config))
    return config
