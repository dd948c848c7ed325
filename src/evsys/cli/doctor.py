"""`evsys doctor`: what the local sandbox can use on this machine, what is degraded, and how to fix it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from evsys.sandbox.local.doctor import Check


def _table(title: str, checks: list[Check]) -> object:
    from rich.table import Table

    table = Table(title=title, show_lines=False)
    for column in ("check", "status", "detail", "fix"):
        table.add_column(column, overflow="fold")  # a narrow terminal wraps paths, never cuts them
    for check in checks:
        if check.ok:
            status = "[green]ok[/green]"
        elif check.required:
            status = "[red]missing[/red]"
        else:
            status = "[yellow]degraded[/yellow]"
        table.add_row(check.name, status, check.detail, "" if check.ok else check.fix)
    return table


def doctor() -> None:
    """Check bwrap, overlayfs, cgroups, seccomp, user namespaces, and the image tools; exit 1 if the local
    sandbox cannot run."""
    from rich.console import Console

    from evsys.images.doctor import image_checks
    from evsys.sandbox.local.doctor import run_checks

    checks = run_checks()
    images = image_checks()
    console = Console()
    console.print(_table("evsys local sandbox", checks))
    console.print(_table("environment images (docs/images.md)", images))
    missing = [c.name for c in images if not c.ok]
    if missing:
        console.print(f"[yellow]Images work with limits:[/yellow] {', '.join(missing)} (see the fix column)")
    broken = [c.name for c in checks if c.required and not c.ok]
    if broken:
        console.print(f"[red]The local sandbox cannot run here:[/red] {', '.join(broken)}")
        raise typer.Exit(1)
    degraded = [c.name for c in checks if not c.ok]
    if degraded:
        names = ", ".join(degraded)
        console.print(f"[yellow]The local sandbox runs with reduced guarantees:[/yellow] {names}")
    else:
        console.print("[green]The local sandbox is fully supported here.[/green]")
