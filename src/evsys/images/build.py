"""Building a task's `environment/Dockerfile` with `buildah bud` into evsys's storage.

Every `FROM` base is resolved first (see service.py: stored, pulled or synthesised), then buildah builds with
`--pull=never` against evsys's storage, chroot isolation and its layer cache. RUN steps get the host's network
and the host's CA bundle (a TLS-inspecting proxy's certificates included): the bundle is mounted read-only at
`CA_MOUNT` for the build only, and the variables pointing tools at it (`CA_VARIABLES`) reach RUN steps as
build arguments declared after each `FROM` of a rewritten copy of the Dockerfile, so neither the certificates
nor the variables end up in the image's layers or config.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from evsys.images.build_errors import failed_step
from evsys.images.storage import ImageError, LineCallback, Storage, run_tool
from evsys.task.dockerfile_syntax import split_instructions
from evsys.task.dockerignore import DockerIgnore
from evsys.util.hostca import CA_VARIABLES, ca_environment, host_ca_bundle

KEY_VERSION = "1"
CA_MOUNT = "/run/evsys-ca/ca-certificates.crt"
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")
_FROM_LINE = re.compile(r"(?im)^(\s*FROM\s[^\n]*)$")
_ARG_REF = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}?")


class BuildFailed(ImageError):
    """`buildah bud` failed or timed out; `log_tail` holds the end of its output."""

    def __init__(self, message: str, log_tail: str, *, timed_out: bool = False) -> None:
        super().__init__(f"{message}\n{log_tail}" if log_tail else message)
        self.log_tail = log_tail
        self.timed_out = timed_out


@dataclass
class BuildContext:
    """A Dockerfile, its context directory and build arguments."""

    dockerfile: Path
    context: Path
    build_args: dict[str, str] = field(default_factory=dict)
    stored_as: dict[str, str] = field(default_factory=dict)  # a base as written -> its name in the storage

    def text(self) -> str:
        """The Dockerfile's text."""
        try:
            return self.dockerfile.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise ImageError(f"cannot read {self.dockerfile}: {exc}") from None

    def bases(self) -> list[str]:
        """The images named by `FROM` lines and `COPY --from` (stage names and `scratch` left out), ARG
        defaults applied."""
        args = dict(self.build_args)
        stages: set[str] = set()
        bases: list[str] = []
        for ins in split_instructions(self.text()):
            if ins.keyword == "ARG" and not stages and not bases:
                name, _, default = ins.args.partition("=")
                args.setdefault(name.strip(), default.strip().strip("\"'"))
            if ins.keyword in ("COPY", "ADD"):  # COPY --from=<an image, not a stage>
                source = re.search(r"--from=(\S+)", ins.args)
                image = source.group(1) if source else None
                if image and image.lower() not in stages and not image.isdigit() and image not in bases:
                    bases.append(image)
                continue
            if ins.keyword != "FROM":
                continue
            words = [w for w in ins.args.split() if not w.startswith("--")]
            if not words:
                raise ImageError(f"{self.dockerfile}: FROM needs an image name")
            image = _ARG_REF.sub(lambda m: args.get(m.group(1)) or (m.group(2) or ""), words[0])
            if len(words) >= 3 and words[1].lower() == "as":
                stages.add(words[2].lower())
            if image.lower() in stages or image == "scratch" or image in bases:
                continue
            bases.append(image)
        return bases

    def context_digest(self) -> str:
        """A hash of every file the build can see (after `.dockerignore`): path, mode, content."""
        ignore = DockerIgnore.of_context(self.context)
        h = hashlib.sha256()
        for root, dirs, files in os.walk(self.context):
            dirs.sort()
            rel_root = os.path.relpath(root, self.context)
            for name in sorted(files) + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
                rel = os.path.normpath(os.path.join(rel_root, name))
                if ignore.ignored(rel):
                    continue
                path = os.path.join(root, name)
                st = os.lstat(path)
                h.update(f"{rel}\0{st.st_mode:o}\0".encode())
                h.update(os.readlink(path).encode() if os.path.islink(path) else _file_digest(path))
        return h.hexdigest()

    def fingerprint(self) -> tuple[int, str]:
        """(number of entries, a hash of every context entry's path, size, mtime and mode): cheap to compute,
        it changes whenever `key` might."""
        h = hashlib.sha256(f"{self.dockerfile}\0{sorted(self.build_args.items())}".encode())
        count = 0
        for path in [str(self.dockerfile), *_walk(self.context)]:
            st = os.lstat(path)
            h.update(f"{path}|{st.st_size}|{st.st_mtime_ns}|{st.st_mode}\0".encode())
            count += 1
        return count, h.hexdigest()

    def key(self, base_ids: list[str]) -> str:
        """The content key of the image: Dockerfile, context, base image ids and build args."""
        h = hashlib.sha256(f"{KEY_VERSION}\0".encode())
        h.update(self.text().encode())
        h.update(self.context_digest().encode())
        for base in base_ids:
            h.update(f"\0base:{base}".encode())
        for name in sorted(self.build_args):
            h.update(f"\0arg:{name}={self.build_args[name]}".encode())
        return h.hexdigest()


def _walk(top: Path) -> Iterator[str]:
    for root, dirs, files in os.walk(top):
        dirs.sort()
        for name in sorted(files) + dirs:
            yield os.path.join(root, name)


def _file_digest(path: str) -> bytes:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.digest()


def _keep_prefix(name: str) -> Callable[[re.Match[str]], str]:
    """A `re.sub` replacement: the match's first group followed by `name` (taken as is, no escapes)."""
    return lambda match: match.group(1) + name


def with_stored_bases(text: str, stored_as: dict[str, str]) -> str:
    """The Dockerfile with each base reference (`FROM x`, `COPY --from=x`) that is stored under another name
    (one given by digest) replaced by that name: buildah finds it without a registry."""
    for written, stored in stored_as.items():
        if written == stored:
            continue
        quoted = re.escape(written)
        text = re.sub(rf"(?im)^(\s*FROM\s+(?:--\S+\s+)*){quoted}(?=\s|$)", _keep_prefix(stored), text)
        text = re.sub(rf"(?i)--from={quoted}(?=\s)", f"--from={stored}", text)
    return text


def with_ca_args(text: str) -> str:
    """The Dockerfile with `ARG <CA variable>` declared after every FROM line (values come from --build-arg,
    so they reach RUN steps without entering the image config)."""
    declare = "\n".join(f"ARG {name}" for name in CA_VARIABLES)
    return _FROM_LINE.sub(lambda m: f"{m.group(1)}\n{declare}", text)


async def buildah_bud(
    storage: Storage,
    ctx: BuildContext,
    tag: str,
    *,
    timeout: float,  # noqa: ASYNC109 - the build's own limit
    log: Path | None = None,
    on_line: LineCallback | None = None,
) -> None:
    """Build `ctx` into `storage` as `tag`; raise BuildFailed with the log tail on failure or timeout."""
    storage.home.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="build-", dir=storage.home) as tmp:
        argv = storage.buildah(
            "bud", "--isolation", "chroot", "--layers", "--force-rm", "--pull=never", "-t", tag
        )
        text = with_stored_bases(ctx.text(), ctx.stored_as)
        bundle = host_ca_bundle()
        if bundle is not None and _FROM_LINE.search(text):
            text = with_ca_args(text)
            argv += ["--volume", f"{bundle}:{CA_MOUNT}:ro"]
            for name, value in ca_environment(CA_MOUNT).items():
                argv += ["--build-arg", f"{name}={value}"]
        for name in PROXY_VARIABLES:
            if os.environ.get(name):
                argv += ["--build-arg", f"{name}={os.environ[name]}"]
        for name, value in sorted(ctx.build_args.items()):
            argv += ["--build-arg", f"{name}={value}"]
        dockerfile = Path(tmp) / "Dockerfile"
        dockerfile.write_text(text)
        ignore = ctx.context / ".dockerignore"
        if ignore.is_file():  # buildah looks for <Dockerfile>.dockerignore beside a Dockerfile given by -f
            (Path(tmp) / "Dockerfile.dockerignore").write_bytes(ignore.read_bytes())
        argv += ["-f", str(dockerfile), str(ctx.context)]
        result = await run_tool(argv, timeout=timeout, log=log, on_line=on_line)
    if result.timed_out:
        raise BuildFailed(
            f"building {ctx.dockerfile} timed out after {timeout:g} s (build_timeout_sec)",
            _tail(result.output),
            timed_out=True,
        )
    if result.returncode != 0:
        message = f"building {ctx.dockerfile} failed (exit {result.returncode})"
        step = failed_step(result.output, ctx.text())
        if step is not None:
            message += f" at {step.headline(str(ctx.dockerfile))}"
            message += "".join(f"\n  {line}" for line in step.error_lines)
            message += "\nlast lines of the build log:"
        raise BuildFailed(message, _tail(result.output))


def _tail(output: str, lines: int = 25) -> str:
    return "\n".join(output.rstrip().splitlines()[-lines:])
