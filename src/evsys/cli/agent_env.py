"""`evsys run --env-file FILE --agent-env KEY=VALUE`: environment (API keys, settings) for the job's agents.

Values reach harness processes and custom agents (`ctx.env`) and are never written to the job directory in
clear: `config.json` keeps the names with `**********` values, so `--resume` needs the values again (the same
flags) and refuses to run without them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from evsys.cli.checks import fail

if TYPE_CHECKING:
    from evsys.engine.config import JobConfig

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
REDACTED = "**********"


def read_agent_env(pairs: list[str], files: list[Path]) -> dict[str, str]:
    """The variables of the `--env-file` files (in order), then of `--agent-env KEY=VALUE` (which win)."""
    env: dict[str, str] = {}
    for file in files:
        env.update(_env_file(file))
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise fail(f"--agent-env {pair!r}: write KEY=VALUE")
        env[_checked(name.strip(), "--agent-env")] = value
    return env


def _env_file(file: Path) -> dict[str, str]:
    """The variables of one .env file; a usage error naming `file:line` for a line that is not KEY=VALUE
    (python-dotenv would skip it with a warning and the job would run without the variable)."""
    from dotenv import dotenv_values
    from dotenv.parser import parse_stream

    if not file.is_file():
        raise fail(f"--env-file {file}: no such file")
    with file.open(encoding="utf-8") as stream:
        for binding in parse_stream(stream):
            if binding.error:
                line = binding.original.string.strip()
                raise fail(f"--env-file {file}:{binding.original.line}: {line!r} is not KEY=VALUE")
    env = {}
    for name, value in dotenv_values(file).items():
        if value is None:
            raise fail(f"--env-file {file}: {name} has no value (write {name}=VALUE)")
        env[_checked(name, f"--env-file {file}")] = value
    return env


def _checked(name: str, where: str) -> str:
    if not _NAME.match(name):
        raise fail(f"{where}: {name!r} is not an environment variable name")
    return name


def restore_env(config: JobConfig, env: dict[str, str]) -> None:
    """On resume: give every agent the values of the variables its config.json names (redacted there)."""
    from pydantic import SecretStr

    for agent in config.agents:
        missing = [name for name in agent.env if name not in env]
        if missing:
            raise fail(
                f"agent {agent.name!r} was run with {', '.join(sorted(missing))} in its environment; "
                "give the values again (--env-file / --agent-env) to resume"
            )
        agent.env = {name: SecretStr(env[name]) for name in agent.env}
