"""Read a task's `environment/Dockerfile` and apply the directives that need no image build.

The local sandbox runs on the host's own `/usr`, so evsys honours only what it can reproduce without
building an image: `WORKDIR`, `ENV`, `ARG`, `COPY`/`ADD` of files under `environment/` (minus what
`environment/.dockerignore` excludes, see dockerignore.py), and `FROM` of a base the host's root filesystem
provably stands in for (see hostbase.py). `RUN`, any other base image, multi-stage builds, `ADD` of a URL or
an archive and docker-compose files mark the environment as `needs_image`, with one reason per line.
"""

from __future__ import annotations

import glob
import json
import posixpath
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from evsys.records import FileCopy
from evsys.task.compose import ComposeError, parse_compose
from evsys.task.dockerfile_syntax import HEREDOC, Instruction, split_instructions
from evsys.task.dockerignore import DockerIgnore
from evsys.task.hostbase import host_mismatch
from evsys.task.models import CopyOptions, Problem, ResolvedEnvironment

DOCKERFILE = "environment/Dockerfile"
COMPOSE_FILES = ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml")

ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".tar.zst")
IGNORED_DIRECTIVES = {
    "EXPOSE",
    "CMD",
    "ENTRYPOINT",
    "LABEL",
    "MAINTAINER",
    "HEALTHCHECK",
    "STOPSIGNAL",
    "VOLUME",
    "SHELL",
    "ONBUILD",
}
KNOWN_USERS = {"root", "0", "0:0", "agent"}
# What `$PATH` is before any `ENV PATH=...`: Docker's default for a Linux image (the Debian, Ubuntu and python
# bases set this; the local sandbox uses the host /usr).
DOCKER_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_VAR = re.compile(
    r"\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?::(?P<op>[-+])(?P<word>[^}]*))?\}|(?P<plain>[A-Za-z_][A-Za-z0-9_]*))"
)


@dataclass
class _State:
    """What the directives seen so far have built up."""

    context: Path
    ignore: DockerIgnore = field(default_factory=lambda: DockerIgnore([]))
    workdir: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    args: dict[str, str] = field(default_factory=dict)
    known_dirs: set[str] = field(
        default_factory=lambda: {"/", "/app", "/tmp", "/root", "/home", "/opt", "/srv"}
    )
    base_env: dict[str, str] = field(default_factory=lambda: {"PATH": DOCKER_DEFAULT_PATH})
    result: ResolvedEnvironment = field(default_factory=ResolvedEnvironment)
    problems: list[Problem] = field(default_factory=list)
    froms: int = 0

    def error(self, line: int, message: str) -> None:
        """Record an error located at a Dockerfile line."""
        self.problems.append(Problem(file=DOCKERFILE, field=str(line), message=message))

    def warn(self, line: int, message: str) -> None:
        """Record a warning located at a Dockerfile line."""
        self.problems.append(Problem(file=DOCKERFILE, field=str(line), message=message, severity="warning"))

    def scope(self) -> dict[str, str]:
        """The variables `${...}` sees: the base image's environment, then ARGs, then ENVs so far."""
        return {**self.base_env, **self.args, **self.env}

    def needs_image(self, line: int, reason: str) -> None:
        """Mark the environment as needing an image build."""
        self.result.needs_image = True
        self.result.image_reasons.append(f"{DOCKERFILE}:{line}: {reason}")


def expand_vars(text: str, values: dict[str, str]) -> str:
    """Expand `$VAR`, `${VAR}`, `${VAR:-default}` and `${VAR:+alt}` from `values` (unknown names: "")."""

    def replace(match: re.Match[str]) -> str:
        name = match.group("braced") or match.group("plain")
        value = values.get(name, "")
        op = match.group("op")
        if op == "-":
            return value or match.group("word")
        if op == "+":
            return match.group("word") if value else ""
        return value

    return _VAR.sub(replace, text)


def _json_or_shell(args: str) -> list[str] | None:
    """Parse exec (JSON array) form, else shell-like words; None when the words cannot be split."""
    if args.startswith("["):
        try:
            parsed = json.loads(args)
        except json.JSONDecodeError:
            parsed = None
        if isinstance(parsed, list) and all(isinstance(x, str) for x in parsed):
            return parsed
    try:
        return shlex.split(args, posix=True)
    except ValueError:
        return None


def _do_from(state: _State, ins: Instruction) -> None:
    words = [w for w in ins.args.split() if not w.startswith("--")]
    state.froms += 1
    if not words:
        state.error(ins.line, "FROM needs an image name")
        return
    image = expand_vars(words[0], state.args)
    if state.froms > 1:
        state.needs_image(ins.line, "a multi-stage build needs an image build")
    if "$" in words[0] and not image:
        state.needs_image(ins.line, f"FROM {words[0]} needs an image build")
    elif (mismatch := host_mismatch(image)) is not None:
        state.needs_image(ins.line, f"FROM {image} needs its image: {mismatch}")
        state.result.base_reason = state.result.image_reasons[-1]
    state.result.base_image = state.result.base_image or image


def _do_workdir(state: _State, ins: Instruction) -> None:
    path = expand_vars(ins.args.strip().strip('"'), state.scope())
    if not path:
        state.error(ins.line, "WORKDIR needs a path")
        return
    state.workdir = posixpath.normpath(posixpath.join(state.workdir or "/", path))
    state.known_dirs.add(state.workdir)


def _do_env(state: _State, ins: Instruction, *, is_arg: bool = False) -> None:
    words = _json_or_shell(ins.args) if "=" in ins.args.split(" ", 1)[0] else None
    target = state.args if is_arg else state.env
    scope = state.scope()
    if words is not None:
        for word in words:
            key, eq, value = word.partition("=")
            if not eq and not is_arg:
                state.error(ins.line, f"ENV expects KEY=VALUE pairs, got '{word}'")
                return
            if is_arg and not eq:
                target.setdefault(key, "")
                continue
            target[key] = expand_vars(value, scope)
        return
    key, _, value = ins.args.partition(" ")
    if not key:
        state.error(ins.line, f"{'ARG' if is_arg else 'ENV'} needs a name")
    elif is_arg:
        target.setdefault(key, "")
    elif not value.strip():
        state.error(ins.line, f"ENV {key} has no value")
    else:
        target[key] = expand_vars(value.strip(), scope)


def _copy_flags(state: _State, ins: Instruction, words: list[str]) -> tuple[dict[str, str], list[str]] | None:
    flags: dict[str, str] = {}
    while words and words[0].startswith("--"):
        name, _, value = words.pop(0)[2:].partition("=")
        if name not in {"chown", "chmod", "from", "link", "parents", "exclude", "keep-git-dir", "checksum"}:
            state.error(ins.line, f"{ins.keyword} has an unknown flag --{name}")
            return None
        flags[name] = value
    return flags, words


def _do_copy(state: _State, ins: Instruction) -> None:
    if HEREDOC.search(ins.args.split("\n", 1)[0]):
        state.needs_image(ins.line, f"{ins.keyword} of an inline file (heredoc) needs an image build")
        return
    words = _json_or_shell(ins.args)
    if words is None:
        state.error(ins.line, f"{ins.keyword} arguments cannot be parsed: {ins.args}")
        return
    parsed = _copy_flags(state, ins, list(words))
    if parsed is None:
        return
    flags, words = parsed
    if len(words) < 2:
        state.error(ins.line, f"{ins.keyword} needs at least one source and a destination")
        return
    if "from" in flags:
        state.needs_image(ins.line, f"{ins.keyword} --from={flags['from']} needs an image build")
        return
    scope = state.scope()
    sources = [expand_vars(s, scope) for s in words[:-1]]
    dest = expand_vars(words[-1], scope)
    if ins.keyword == "ADD":
        remote = [s for s in sources if re.match(r"^(https?|git|ssh)://|^git@", s)]
        archives = [s for s in sources if s.lower().endswith(ARCHIVE_SUFFIXES)]
        if remote or archives:
            what = "a URL" if remote else "an archive (ADD extracts it)"
            state.needs_image(ins.line, f"ADD of {what} needs an image build")
            return
    matched = _resolve_sources(state, ins, sources)
    if matched is None:
        return
    _place(state, ins, matched, dest, many=len(sources) > 1 or any(_has_glob(s) for s in sources))
    if flags.get("chown") or flags.get("chmod"):
        state.result.copy_options.append(
            CopyOptions(
                line=ins.line, dst=_absolute(state, dest), chown=flags.get("chown"), chmod=flags.get("chmod")
            )
        )


def _has_glob(text: str) -> bool:
    return any(c in text for c in "*?[")


def _resolve_sources(state: _State, ins: Instruction, sources: list[str]) -> list[Path] | None:
    """Map COPY sources to host paths inside the build context; None (error recorded) on a bad source."""
    context = state.context.resolve()
    found: list[Path] = []
    for source in sources:
        relative = source.lstrip("/") or "."
        candidate = (context / relative).resolve()
        if candidate != context and context not in candidate.parents:
            state.error(ins.line, f"{ins.keyword} source '{source}' is outside environment/")
            return None
        if _has_glob(relative):
            hits = sorted(Path(p) for p in glob.glob(str(context / relative)))
            hits = [h for h in hits if h.resolve() == context or context in h.resolve().parents]
            hits = [h for h in hits if not state.ignore.ignored(str(h.relative_to(context)))]
            if not hits:
                state.error(ins.line, f"{ins.keyword} source '{source}' matches no file in environment/")
                return None
            found.extend(h.resolve() for h in hits)
        elif not candidate.exists():
            state.error(ins.line, f"{ins.keyword} source '{source}' does not exist in environment/")
            return None
        elif state.ignore.ignored(str(candidate.relative_to(context))):
            state.error(ins.line, f"{ins.keyword} source '{source}' is excluded by environment/.dockerignore")
            return None
        else:
            found.append(candidate)
    for path in found:
        escape = _escaping_link(path, context) if path.is_dir() else None
        if escape is not None:
            state.error(
                ins.line, f"{ins.keyword} source '{escape.relative_to(context)}' links outside environment/"
            )
            return None
    return found


def _escaping_link(directory: Path, context: Path) -> Path | None:
    """The first symlink under `directory` that points outside the build context, if any."""
    for path in sorted(directory.rglob("*")):
        if path.is_symlink():
            target = path.resolve()
            if target != context and context not in target.parents:
                return path
    return None


def _absolute(state: _State, dest: str) -> str:
    base = state.workdir or "/"
    joined = posixpath.normpath(posixpath.join(base, dest))
    return joined if joined.startswith("/") else "/" + joined


def _place(state: _State, ins: Instruction, sources: list[Path], dest: str, *, many: bool) -> None:
    target = _absolute(state, dest)
    into_dir = dest.endswith("/") or dest in {".", "./"} or many or target in state.known_dirs
    for source in sources:
        if source.is_dir():
            exclude = state.ignore.excluded_under(source, state.context.resolve())
            state.result.files.append(FileCopy(src=source, dst=target, exclude=exclude))
            state.known_dirs.add(target)
        elif into_dir:
            state.result.files.append(FileCopy(src=source, dst=posixpath.join(target, source.name)))
            state.known_dirs.add(target)
        else:
            state.result.files.append(FileCopy(src=source, dst=target))


def _do_user(state: _State, ins: Instruction) -> None:
    user = expand_vars(ins.args.strip(), state.scope())
    state.result.user = user
    if user not in KNOWN_USERS:
        state.warn(ins.line, f"USER {user} is unknown to the local sandbox (it runs as 'agent' or 'root')")


def parse_dockerfile(
    text: str, context: Path, *, base_env: dict[str, str] | None = None
) -> tuple[ResolvedEnvironment, list[Problem]]:
    """Apply the image-free directives of a Dockerfile; `context` is the task's `environment/` directory.

    `base_env` is the base image's environment, which `${VAR}` in ENV/WORKDIR/USER/COPY starts from (default:
    PATH=`DOCKER_DEFAULT_PATH`, as Docker gives an image that sets none); only variables the Dockerfile sets
    end up in the result's `env`."""
    state = _State(context=context, ignore=DockerIgnore.of_context(context))
    if base_env is not None:
        state.base_env = dict(base_env)
    instructions = split_instructions(text)
    for ins in instructions:
        if ins.keyword == "FROM":
            _do_from(state, ins)
        elif ins.keyword == "WORKDIR":
            _do_workdir(state, ins)
        elif ins.keyword in {"ENV", "ARG"}:
            _do_env(state, ins, is_arg=ins.keyword == "ARG")
        elif ins.keyword in {"COPY", "ADD"}:
            _do_copy(state, ins)
        elif ins.keyword == "RUN":
            state.needs_image(ins.line, "RUN needs an image build")
        elif ins.keyword == "USER":
            _do_user(state, ins)
        elif ins.keyword in IGNORED_DIRECTIVES:
            if ins.keyword == "ENTRYPOINT":  # it changes what runs before the agent: never dropped silently
                state.needs_image(ins.line, "ENTRYPOINT runs at sandbox start on the task's image")
                continue
            state.result.ignored.append(
                f"{DOCKERFILE}:{ins.line}: {ins.keyword} is not applied by the local sandbox"
            )
        else:
            state.error(ins.line, f"unknown instruction '{ins.keyword}'")
    if instructions and state.froms == 0:
        state.warn(1, "no FROM line; the local sandbox uses the host's /usr")
    state.result.env = dict(state.env)
    if state.workdir:
        state.result.workdir = state.workdir
    return state.result, state.problems


def resolve_environment(task_dir: Path) -> tuple[ResolvedEnvironment, list[Problem]]:
    """Resolve `task_dir/environment/`: its Dockerfile (if any) and compose files (which need an image)."""
    return resolve_environment_dir(task_dir / "environment")


def resolve_environment_dir(env_dir: Path) -> tuple[ResolvedEnvironment, list[Problem]]:
    """Resolve an environment directory (a task's `environment/`, or another directory holding a Dockerfile
    or compose file, such as a separate verifier's): its Dockerfile (if any) and compose files."""
    result = ResolvedEnvironment()
    problems: list[Problem] = []
    dockerfile = env_dir / "Dockerfile"
    if dockerfile.is_file():
        try:
            text = dockerfile.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            return result, [Problem(file=DOCKERFILE, message=f"cannot be read: {exc}")]
        result, problems = parse_dockerfile(text, env_dir)
    for name in COMPOSE_FILES:
        if (env_dir / name).is_file():
            result.needs_image = True
            result.image_reasons.append(
                f"environment/{name}: a docker-compose environment needs an image build"
            )
            try:
                result.compose, warnings = parse_compose(env_dir / name)
            except ComposeError as exc:
                problems.append(
                    Problem(file=f"environment/{name}", field=exc.field or None, message=str(exc))
                )
                break
            problems += [
                Problem(file=f"environment/{name}", field=f, message=m, severity="warning")
                for f, m in warnings
            ]
            result.env = {**result.env, **result.compose.main_environment}  # compose's env beats ENV
            break
    return result, problems
