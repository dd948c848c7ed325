"""Drives `EvsysEnvironment` through Harbor's own `BaseEnvironment` API, as Harbor's trial does, and prints
what every call gave as JSON. Runs under Harbor's Python (the .venv-harbor); test_contract.py reads it:

    python contract_probe.py SCRATCH_DIR
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from harbor.environments.base import BaseEnvironment, HealthcheckError
from harbor.environments.factory import EnvironmentFactory
from harbor.models.task.config import EnvironmentConfig, HealthcheckConfig, NetworkMode, NetworkPolicy
from harbor.models.trial.paths import TrialPaths

IMPORT_PATH = "evsys.integrations.harbor:EvsysEnvironment"


def environment(scratch: Path, name: str, **config: object) -> BaseEnvironment:
    """An environment made the way Harbor's trial makes one loaded by import path."""
    env_dir = scratch / name / "environment"
    env_dir.mkdir(parents=True)
    (env_dir / "Dockerfile").write_text("FROM python:3.11-slim-bookworm\nWORKDIR /app\nCOPY seed.txt /app/\n")
    (env_dir / "seed.txt").write_text("from the Dockerfile\n")
    trial_paths = TrialPaths(scratch / name / "trial")
    trial_paths.mkdir()
    return EnvironmentFactory.create_environment_from_import_path(
        IMPORT_PATH,
        environment_dir=env_dir,
        environment_name=name,
        session_id=f"{name}__probe__env",
        trial_paths=trial_paths,
        task_env_config=EnvironmentConfig(**config),
    )


async def out(harbor_env: BaseEnvironment, command: str, **kwargs: object) -> str:
    """stdout of `command` (its stderr when it printed nothing), stripped."""
    result = await harbor_env.exec(command, **kwargs)
    return ((result.stdout or "") or (result.stderr or "")).strip()


async def commands(scratch: Path) -> dict[str, object]:
    """exec with its users, variables, directories and timeouts; a variable from task.toml."""
    variables = {"FROM_TASK": "task-value"}
    env = environment(scratch, "commands", workdir="/app", env=variables, network_mode="no-network")
    await env.start(force_build=False)
    got: dict[str, object] = {"type": env.type()}
    got["default_user"] = await out(env, "id -un")
    got["agent_by_name"] = await out(env, "id -un", user="agent")
    got["agent_by_uid"] = await out(env, "id -un", user=1000)
    got["root_by_uid"] = await out(env, "id -un", user=0)
    with env.with_default_user("agent"):
        got["scoped_default_user"] = await out(env, "id -un")
    got["cwd_default"] = await out(env, "pwd")
    got["cwd_given"] = await out(env, "pwd", cwd="/tmp")
    got["seed"] = await out(env, "cat seed.txt")
    got["env_given"] = await out(env, 'echo "$GIVEN"', env={"GIVEN": "given-value"})
    got["env_task"] = await out(env, 'echo "$FROM_TASK"')
    result = await env.exec("echo to-stderr >&2; exit 3")
    got["exit_and_stderr"] = [result.return_code, result.stderr]
    try:
        await env.exec("sleep 60", timeout_sec=1)
        got["timeout"] = "returned"
    except RuntimeError as exc:
        got["timeout"] = str(exc)
    await env.stop(delete=True)
    try:
        await env.exec("true")
        got["after_stop"] = "ran"
    except RuntimeError as exc:
        got["after_stop"] = type(exc).__name__
    return got


async def files(scratch: Path) -> dict[str, object]:
    """upload/download of files and directories, both ways."""
    env = environment(scratch, "files", workdir="/app", network_mode="no-network")
    host = scratch / "files" / "host"
    (host / "tree" / "nested").mkdir(parents=True)
    (host / "one.txt").write_text("one file\n")
    (host / "tree" / "top.txt").write_text("top\n")
    (host / "tree" / "nested" / "deep.txt").write_text("deep\n")
    await env.start(force_build=False)
    got: dict[str, object] = {}
    await env.upload_file(host / "one.txt", "/srv/in/one.txt")
    await env.upload_dir(host / "tree", "/srv/tree")
    got["uploaded"] = await out(env, "cat /srv/in/one.txt /srv/tree/top.txt /srv/tree/nested/deep.txt")
    await env.exec("mkdir -p /app/out/sub && echo made > /app/out/a.txt && echo below > /app/out/sub/b.txt")
    await env.download_file("/app/out/a.txt", host / "down" / "a.txt")
    await env.download_dir("/app/out", host / "down-dir")
    got["downloaded_file"] = (host / "down" / "a.txt").read_text()
    got["downloaded_dir"] = sorted(
        str(p.relative_to(host / "down-dir")) for p in (host / "down-dir").rglob("*") if p.is_file()
    )
    got["is_dir"] = [await env.is_dir("/app/out"), await env.is_dir("/app/out/a.txt")]
    await env.stop(delete=True)
    return got


async def network_and_limits(scratch: Path) -> dict[str, object]:
    """Switching the network policy between phases, a memory limit, a healthcheck that fails."""
    connect = "python3 -c 'import socket; socket.create_connection((\"pypi.org\", 443), 10)' && echo open"
    env = environment(scratch, "network", network_mode="public")
    await env.start(force_build=False)
    got: dict[str, object] = {"public": await out(env, connect)}
    await env.set_network_policy(NetworkPolicy(network_mode=NetworkMode.NO_NETWORK))
    got["switched_off"] = await out(env, connect + " || echo closed")
    await env.set_network_policy(NetworkPolicy(network_mode=NetworkMode.PUBLIC))
    got["switched_back"] = await out(env, connect)
    await env.stop(delete=True)

    hog = "python3 -c 'b = bytearray(400 << 20); print(len(b))'"
    for name, memory in (("unlimited", None), ("limited", 128)):
        env = environment(scratch, f"memory-{name}", memory_mb=memory, network_mode="no-network")
        await env.start(force_build=False)
        got[f"memory_{name}"] = (await env.exec(hog)).return_code
        await env.stop(delete=True)

    check = HealthcheckConfig(command="false", interval_sec=0.1, retries=2)
    env = environment(scratch, "health", healthcheck=check, network_mode="no-network")
    await env.start(force_build=False)
    try:
        await env.run_healthcheck()
        got["healthcheck"] = "passed"
    except HealthcheckError as exc:
        got["healthcheck"] = str(exc)
    await env.stop(delete=True)
    return got


PROBES = {"commands": commands, "files": files, "network_and_limits": network_and_limits}


async def main(scratch: Path, names: list[str]) -> None:
    results = {name: await PROBES[name](scratch) for name in names}
    print(json.dumps(results))


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2:] or list(PROBES)))
