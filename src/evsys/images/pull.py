"""Pulling images from OCI registries into evsys's storage with skopeo.

Credentials come from the user's containers auth file (`$REGISTRY_AUTH_FILE`,
`$XDG_RUNTIME_DIR/containers/auth.json`, `~/.config/containers/auth.json`, `~/.docker/config.json`: the
first that exists). Mirrors and blocked registries follow the containers `registries.conf` files
(`/etc/containers/registries.conf`, `~/.config/containers/registries.conf`), which skopeo reads itself.
A registry on the loopback interface is spoken to over plain HTTP.
"""

from __future__ import annotations

import os
from pathlib import Path

from evsys.images.refs import ImageRef
from evsys.images.storage import ImageError, LineCallback, Storage, run_tool, tool

PULL_TIMEOUT = 1800.0
_AUTH_WORDS = ("unauthorized", "authentication required", "denied", "401")
_MISSING_WORDS = ("manifest unknown", "not found", "name unknown", "404")
_UNREACHABLE_WORDS = ("connection refused", "no such host", "i/o timeout", "dial tcp", "tls:", "eof")


class PullError(ImageError):
    """An image could not be pulled; `kind` is "auth", "missing", "unreachable" or "other"."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def auth_file() -> Path | None:
    """The containers auth file evsys (and skopeo) use, or None when there is none."""
    candidates = [os.environ.get("REGISTRY_AUTH_FILE")]
    if runtime := os.environ.get("XDG_RUNTIME_DIR"):
        candidates.append(f"{runtime}/containers/auth.json")
    home = Path.home()
    candidates += [str(home / ".config/containers/auth.json"), str(home / ".docker/config.json")]
    return next((Path(c) for c in candidates if c and Path(c).is_file()), None)


def classify(output: str) -> str:
    """The kind of a skopeo failure from its message."""
    text = output.lower()
    if any(w in text for w in _AUTH_WORDS):
        return "auth"
    if any(w in text for w in _MISSING_WORDS):
        return "missing"
    if any(w in text for w in _UNREACHABLE_WORDS):
        return "unreachable"
    return "other"


def _message(ref: ImageRef, kind: str, output: str) -> str:
    detail = output.strip().splitlines()[-1][-400:] if output.strip() else "no output"
    if kind == "auth":
        used = auth_file()
        where = f"auth file {used}" if used else "no auth file found (run `skopeo login` or `docker login`)"
        return f"pulling {ref}: registry {ref.registry} refused the credentials ({where}): {detail}"
    if kind == "missing":
        return f"pulling {ref}: registry {ref.registry} has no such image or tag: {detail}"
    if kind == "unreachable":
        return f"pulling {ref}: registry {ref.registry} is unreachable: {detail}"
    return f"pulling {ref} failed: {detail}"


async def pull(
    storage: Storage,
    ref: ImageRef,
    *,
    timeout: float = PULL_TIMEOUT,  # noqa: ASYNC109 - the pull's own limit
    log: Path | None = None,
    on_line: LineCallback | None = None,
) -> None:
    """Copy `ref` from its registry into `storage` under its full name (and digest when given by digest)."""
    argv = [tool("skopeo"), "copy", "--retry-times", "1"]
    if (auth := auth_file()) is not None:
        argv += ["--src-authfile", str(auth)]
    if ref.insecure:
        argv.append("--src-tls-verify=false")
    argv += [f"docker://{ref}", storage.transport(stored_name(ref))]
    storage.home.mkdir(parents=True, exist_ok=True)
    result = await run_tool(argv, timeout=timeout, log=log, on_line=on_line)
    if result.timed_out:
        raise PullError(f"pulling {ref}: no answer within {timeout:.0f} s", "unreachable")
    if result.returncode != 0:
        kind = classify(result.output)
        raise PullError(_message(ref, kind, result.output), kind)


def stored_name(ref: ImageRef) -> str:
    """The name a pulled `ref` has in the storage: its own, or for a digest a tag made of the digest (the
    storage names images by tag)."""
    if ref.digest:
        return f"{ref.name}:digest-{ref.digest.split(':', 1)[1][:32]}"
    return str(ref)
