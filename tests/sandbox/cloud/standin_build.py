"""How the stand-ins build images: they serve the host's root file system as the base image and replay the
build's steps (`RUN`, `COPY` from the archives the SDK uploaded, `ENV`, `WORKDIR`, `USER`) in every sandbox
they start from it, as root unless a step names another user. E2B's SDK sends these steps itself (its
template build); the Daytona stand-in turns the Dockerfile it receives into them (`dockerfile_steps`). A step
a stand-in cannot replay fails the build with the service's error status and the reason."""

from __future__ import annotations

import posixpath
import shlex
from typing import Any

from evsys.sandbox.base import SandboxError
from evsys.sandbox.local.sandbox import LocalSandbox
from evsys.task.dockerfile_syntax import split_instructions

REPLAYED = frozenset({"RUN", "COPY", "ENV", "WORKDIR", "USER"})
CONTEXT_DIR = "/tmp/e2b-standin-context"  # where a COPY step's uploaded archive is unpacked in the sandbox


def unbuildable(steps: list[dict[str, Any]], uploads: dict[str, bytes]) -> str | None:
    """Why the stand-in cannot build these steps, or None."""
    for step in steps:
        if step["type"] not in REPLAYED:
            return f"the stand-in cannot build a {step['type']} step"
        if step["type"] == "COPY" and step.get("filesHash") not in uploads:
            return f"COPY {step['args'][0]}: its files were never uploaded"
    return None


def dockerfile_steps(text: str, host_images: frozenset[str]) -> tuple[list[dict[str, Any]], str | None]:
    """The steps of a one-stage Dockerfile from one of `host_images` (`RUN` in shell form, `ENV`, `WORKDIR`,
    `USER`; `CMD` and the like ignored), or why the stand-in cannot build it."""
    steps: list[dict[str, Any]] = []
    instructions = split_instructions(text)
    if not instructions or instructions[0].keyword != "FROM":
        return [], "no FROM line first"
    if instructions[0].args.split()[0] not in host_images:
        return [], f"the stand-in cannot build {'FROM ' + instructions[0].args.strip()!r}"
    for ins in instructions[1:]:
        if ins.keyword == "RUN" and not ins.args.lstrip().startswith("["):
            steps.append({"type": "RUN", "args": [ins.args]})
        elif ins.keyword == "ENV":
            words = shlex.split(ins.args)
            pairs = [w.split("=", 1) for w in words] if "=" in words[0] else [[words[0], " ".join(words[1:])]]
            steps.append({"type": "ENV", "args": [item for pair in pairs for item in pair]})
        elif ins.keyword in ("WORKDIR", "USER"):
            steps.append({"type": ins.keyword, "args": [ins.args.strip()]})
        elif ins.keyword not in ("CMD", "LABEL", "EXPOSE", "ARG"):
            return [], f"the stand-in cannot build {ins.keyword} {ins.args.strip()!r}"
    return steps, None


def template_env(steps: list[dict[str, Any]]) -> dict[str, str]:
    """The environment the template's `ENV` steps leave (every sandbox of the template starts with it)."""
    env: dict[str, str] = {}
    for step in steps:
        if step["type"] == "ENV":
            args = step["args"]
            env.update(zip(args[::2], args[1::2], strict=True))
    return env


def _user(name: str) -> str:
    return "root" if name in ("", "root", "0") else "agent"


def _copy_command(src: str, dest: str, cwd: str) -> str:
    """The shell line copying the unpacked context path `src` to `dest` as Docker's COPY does."""
    source = shlex.quote(posixpath.normpath(posixpath.join(CONTEXT_DIR, src)))
    target = posixpath.join(cwd, dest)
    quoted = shlex.quote(target)
    into = quoted if dest.endswith("/") else shlex.quote(posixpath.dirname(target) or "/")
    return (
        f"if [ -d {source} ]; then mkdir -p {quoted} && cp -a {source}/. {quoted}; "
        f"else mkdir -p {into} && cp -a {source} {quoted}; fi"
    )


async def replay(local: LocalSandbox, steps: list[dict[str, Any]], uploads: dict[str, bytes]) -> None:
    """Run the template's steps in a fresh sandbox; `SandboxError` with the step's output when one fails."""
    env: dict[str, str] = {}
    cwd, user = "/", "root"
    for step in steps:
        run_in = cwd
        kind, args = step["type"], step["args"]
        if kind == "ENV":
            env.update(zip(args[::2], args[1::2], strict=True))
            continue
        if kind == "USER":
            user = args[0]
            continue
        if kind == "WORKDIR":
            cwd = posixpath.join(cwd, args[0])
            command, as_user, run_in = f"mkdir -p {shlex.quote(cwd)}", "root", "/"
        elif kind == "RUN":
            command, as_user = args[0], (args[1] if len(args) > 1 and args[1] else user)
        else:  # COPY: the uploaded archive of the context path, unpacked and copied to its destination
            await local.write_file(f"{CONTEXT_DIR}.tar", uploads[step["filesHash"]], user="root")
            unpack = (
                f"rm -rf {CONTEXT_DIR}; mkdir -p {CONTEXT_DIR} && tar -xf {CONTEXT_DIR}.tar -C {CONTEXT_DIR}"
            )
            command, as_user = f"{unpack} && {_copy_command(args[0], args[1], cwd)}", "root"
        result = await local.exec(command, cwd=run_in, env=env, user=_user(as_user), timeout=600)
        if result.exit_code != 0:
            output = (result.stdout_bytes + result.stderr_bytes).decode(errors="replace")[-2000:]
            raise SandboxError(f"template step {kind} {args[0]!r} failed ({result.exit_code}): {output}")
