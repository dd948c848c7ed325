"""`evsys view [jobs/ | jobs/<name>]`: the job viewer in the browser, served on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from evsys.cli.complete import complete_job_dir


def view(
    path: Annotated[
        Path,
        typer.Argument(
            help="A jobs directory, or one job's directory.",
            show_default=True,
            autocompletion=complete_job_dir,
        ),
    ] = Path("jobs"),
    port: Annotated[int, typer.Option("--port", help="Port on 127.0.0.1 (0: any free port).")] = 8765,
    tokenizer: Annotated[
        Path | None,
        typer.Option(
            "--tokenizer",
            help="tokenizer.json (or a model dir) to show token text instead of ids; default: a local "
            "model's own tokenizer for its trials (-m local, local:<dir>) when it is on this machine.",
        ),
    ] = None,
    open_browser: Annotated[
        bool, typer.Option("--open/--no-open", help="Open the viewer in a web browser.")
    ] = True,
) -> None:
    """Browse jobs and trials in a local web viewer (read-only; nothing is loaded from the network)."""
    from evsys.viewer.app import create_app
    from evsys.viewer.server import bind, serve, source_for, url_of

    err = Console(stderr=True, highlight=False, soft_wrap=True)
    try:
        source = source_for(path, tokenizer)
        app = create_app(source)
    except (OSError, RuntimeError, ValueError) as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}")
        raise typer.Exit(2) from None
    try:
        sock = bind(port)
    except OSError as exc:
        reason = escape(exc.strerror or str(exc))
        err.print(
            f"[bold red]error:[/] cannot listen on 127.0.0.1:{port} ({reason}); "
            "choose another port with --port (0 picks a free one)"
        )
        raise typer.Exit(2) from None
    url = url_of(sock, source)
    Console(highlight=False, soft_wrap=True).print(f"evsys viewer: {url}  (Ctrl-C to stop)")
    if open_browser:
        import webbrowser

        webbrowser.open(url)
    try:
        serve(app, sock)
    except KeyboardInterrupt:
        pass
