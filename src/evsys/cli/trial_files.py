"""`evsys trial files TRIAL [PATH] [-o DIR]`: what `evsys run --keep-state` kept of a trial's final files.

Without PATH: every kept entry (type, mode, size, sandbox path) and every deletion. With PATH: a kept regular
file's content on stdout, or a directory's entries. With `-o DIR`: PATH (default: everything) extracted under
DIR at its sandbox path; links that would lead outside DIR are skipped.
"""

from __future__ import annotations

import stat
import sys
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from evsys.cli.complete import complete_trial_dir
from evsys.cli.markup import shown

if TYPE_CHECKING:
    from evsys.records.state import KeptState

KINDS = {tarfile.DIRTYPE: "d", tarfile.SYMTYPE: "l", tarfile.LNKTYPE: "h"}


def _fail(message: str) -> typer.Exit:
    Console(stderr=True, highlight=False, soft_wrap=True).print(f"[bold red]error:[/] {message}")
    return typer.Exit(2)


def _line(member: tarfile.TarInfo) -> str:
    kind = KINDS.get(member.type, "-")
    target = f" -> {member.linkname}" if member.issym() or member.islnk() else ""
    return f"{kind}{stat.filemode(member.mode)[1:]} {member.size:>10} /{member.name}{target}"


def trial_files(
    trial_dir: Annotated[
        Path,
        typer.Argument(help="A trial directory (jobs/<job>/<trial>).", autocompletion=complete_trial_dir),
    ],
    path: Annotated[
        str | None, typer.Argument(help="A sandbox path in the kept state (e.g. /app/out.txt).")
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Extract PATH (default: everything) under DIR.")
    ] = None,
) -> None:
    """List the trial's kept final filesystem, print one kept file, or extract it (-o DIR)."""
    from evsys.engine.trial.keep import extract_kept, load_kept_state, read_kept_file

    try:
        manifest = load_kept_state(trial_dir)
    except (OSError, ValueError) as exc:
        raise _fail(
            f"{shown(str(trial_dir))}: state/manifest.json is unreadable: {shown(str(exc))}"
        ) from None
    if manifest is None:
        raise _fail(f"{shown(str(trial_dir))} kept no state (run the job with `evsys run --keep-state`)")
    out = Console(highlight=False, soft_wrap=True)
    if output is not None:
        names = extract_kept(trial_dir, path or "/", output)
        out.print(f"extracted {len(names)} entries under {shown(str(output))}")
        return
    if path is not None:
        data = read_kept_file(trial_dir, path)
        if data is not None:
            sys.stdout.buffer.write(data)
            return
    _list(out, trial_dir, manifest, path)
    if manifest.cut:
        out.print(
            f"[yellow]{len(manifest.cut)} files were left out at the {manifest.limit_bytes >> 20} MB limit[/]"
        )


def _under(name: str, want: str) -> bool:
    return want == "/" or name == want or name.startswith(want + "/")


def _list(out: Console, trial_dir: Path, manifest: KeptState, path: str | None) -> None:
    """The kept entries and deletions at or below `path` (everything without one)."""
    from evsys.engine.trial.keep import kept_members

    want = "/" + (path or "/").strip("/")
    members = [m for m in kept_members(trial_dir) if _under(f"/{m.name}", want)]
    deleted = [d for d in manifest.deletions if _under(d, want)]
    if path is not None and not members and not deleted:
        raise _fail(f"the kept state of {shown(trial_dir.name)} holds no {shown(want)}")
    for member in members:
        out.print(shown(_line(member)))
    for gone in deleted:
        out.print(f"[red]deleted[/] {shown(gone)}")
