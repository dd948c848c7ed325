"""`evsys harness list|install`: the harnesses evsys can run, and installing one ahead of a job."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

harness_app = typer.Typer(no_args_is_help=True)
console = Console(stderr=True)


@harness_app.command("list")
def list_harnesses() -> None:
    """The harnesses `evsys run -a <name>` knows, what they install and whether it is cached here."""
    from evsys.agent.harness.catalog import get_definition, harness_names
    from evsys.agent.harness.install import HarnessInstaller

    installer = HarnessInstaller()
    table = Table("harness", "dialect", "installs", "cached")
    for name in harness_names():
        try:
            definition = get_definition(name)
        except ImportError as exc:
            table.add_row(name, "-", f"[red]unavailable: {exc}[/]", "-")
            continue
        install = definition.install
        packages = f"{install.manager}: {' '.join(install.packages)}" if install else "(nothing)"
        if install is not None and install.node is not None:
            packages += f" (on Node {install.node} from npm)"
        cached = "yes" if install is None or installer.is_cached(install) else "no"
        table.add_row(name, definition.dialect, packages, cached)
    Console().print(table)
    Console().print("and acp:<command>: any ACP agent already in the sandbox (nothing installed)")


@harness_app.command("install")
def install_harness(
    names: Annotated[list[str], typer.Argument(help="Harness names (see `evsys harness list`).")],
) -> None:
    """Install harnesses into the cache now (network only in the install sandbox): trials then start fast."""
    from evsys.agent.harness.catalog import get_definition
    from evsys.agent.harness.install import HarnessInstaller, HarnessInstallError

    installer = HarnessInstaller()
    for name in names:
        try:
            install = get_definition(name).install
        except ValueError as exc:  # an unknown name (UnknownNameError)
            console.print(f"[red]error[/]: {exc}")
            raise typer.Exit(2) from None
        if install is None:
            console.print(f"{name}: nothing to install")
            continue
        started = time.perf_counter()
        with console.status(f"installing {name} ({' '.join(install.packages)})"):
            try:
                tree = asyncio.run(installer.ensure(install))
            except HarnessInstallError as exc:
                console.print(f"[red]error[/]: {name}: {exc}")
                raise typer.Exit(1) from None
        took = time.perf_counter() - started
        console.print(f"{name}: [green]ready[/] in {took:.1f} s at {tree}", highlight=False, soft_wrap=True)
