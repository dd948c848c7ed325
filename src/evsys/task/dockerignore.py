"""`.dockerignore` of a task's build context (`environment/`), with Docker's semantics.

One pattern per line, `#` comments and blank lines skipped, paths relative to the context (a leading `/` and
`./` are dropped, the pattern is cleaned). `*` and `?` match within one path segment, `[...]` a character
class, `**` any number of segments. A pattern matching a directory excludes everything under it. Patterns
apply in order and a `!pattern` re-includes what earlier lines excluded: the last matching line decides.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from pathlib import Path

FILENAME = ".dockerignore"


@dataclass(frozen=True)
class _Pattern:
    regex: re.Pattern[str]
    negated: bool


def _translate(pattern: str) -> re.Pattern[str]:
    """A regex for one cleaned pattern: `**` crosses segments, `*`/`?` do not."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**", i):
            i += 2
            if pattern.startswith("/", i):  # `**/` also matches no directory at all
                out.append("(?:.*/)?")
                i += 1
            else:
                out.append(".*")
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = pattern.find("]", i + 1)
            if end < 0:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1 : end].replace("\\", "\\\\")
                negated = body.startswith(("^", "!"))
                out.append("[" + ("^" + body[1:] if negated else body) + "]")
                i = end
        elif c == "\\" and i + 1 < len(pattern):
            i += 1
            out.append(re.escape(pattern[i]))
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + r"\Z")


class DockerIgnore:
    """The patterns of one build context; `ignored(relative_path)` answers as `docker build` would."""

    def __init__(self, lines: list[str]) -> None:
        self.patterns: list[_Pattern] = []
        for raw in lines:
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            negated = line.startswith("!")
            line = line[1:].strip() if negated else line
            cleaned = posixpath.normpath(line.lstrip("/")) if line.lstrip("/") else "."
            if cleaned == ".":
                continue
            self.patterns.append(_Pattern(_translate(cleaned), negated))

    @classmethod
    def of_context(cls, context: Path) -> DockerIgnore:
        """The context's `.dockerignore`, or no patterns when there is none."""
        path = context / FILENAME
        return cls(path.read_text(errors="replace").splitlines() if path.is_file() else [])

    def ignored(self, relative: str) -> bool:
        """True when the context-relative path (or a directory above it) is excluded."""
        relative = posixpath.normpath(relative)
        if relative == "." or not self.patterns:
            return False
        parts = relative.split("/")
        prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
        excluded = False
        for pattern in self.patterns:
            if any(pattern.regex.match(p) for p in prefixes):
                excluded = not pattern.negated
        return excluded

    def excluded_under(self, directory: Path, context: Path) -> tuple[str, ...]:
        """Paths under `directory` (relative to it) that are excluded: a directory whose whole content is
        excluded is listed alone. Empty when nothing is."""
        if not self.patterns:
            return ()
        found, _ = self._walk(directory, directory, context)
        return tuple(sorted(found))

    def _walk(self, current: Path, top: Path, context: Path) -> tuple[list[str], bool]:
        """(excluded paths under `current`, relative to `top`; True when everything under it is excluded)."""
        negations = any(p.negated for p in self.patterns)  # may re-include files inside an excluded dir
        found: list[str] = []
        everything = True
        for entry in sorted(current.iterdir()):
            name = str(entry.relative_to(top))
            ignored = self.ignored(str(entry.relative_to(context)))
            if entry.is_dir() and not entry.is_symlink() and (negations or not ignored):
                inner, whole = self._walk(entry, top, context)
                if whole and ignored:
                    found.append(name)
                else:
                    found += inner
                everything = everything and whole and ignored
            elif ignored:
                found.append(name)
            else:
                everything = False
        return found, everything
