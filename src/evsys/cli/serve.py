"""`evsys serve PATH`: every task of PATH as an OpenEnv-compatible environment server on 127.0.0.1.

A client from `openenv-core` connects to `ws://HOST:PORT/ws`, resets into an episode (a task by name or seed)
and steps tool actions; MCP clients use `/mcp`. Served episodes are recorded as trials of a job directory
(`--jobs-dir`/`--job-name`), viewable with `evsys view`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape


def serve(
    path: Annotated[
        Path, typer.Argument(help="A task directory, a directory of tasks, or a Python dataset.")
    ],
    port: Annotated[int, typer.Option("--port", help="TCP port (0: any free port).")] = 8000,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    max_sessions: Annotated[
        int, typer.Option("--max-sessions", min=1, help="Concurrent sessions (each holds one sandbox).")
    ] = 64,
    max_steps: Annotated[
        int, typer.Option("--max-steps", min=1, help="Steps before an episode is scored.")
    ] = 100,
    step_timeout: Annotated[
        float,
        typer.Option(
            "--step-timeout", min=0.1, help="Seconds one action may run; answered as timed out after."
        ),
    ] = 30.0,
    idle_timeout: Annotated[
        float,
        typer.Option("--idle-timeout", min=0.1, help="Seconds of silence before a session is reclaimed."),
    ] = 300.0,
    ping_interval: Annotated[
        float, typer.Option("--ping-interval", min=0.1, help="WebSocket ping interval and pong timeout.")
    ] = 20.0,
    max_message_bytes: Annotated[
        int, typer.Option("--max-message-bytes", min=1024, help="Largest request accepted.")
    ] = 1024 * 1024,
    sandbox: Annotated[str, typer.Option("--sandbox", help="Sandbox backend.")] = "local",
    warm_sandboxes: Annotated[
        int,
        typer.Option(
            "--warm-sandboxes",
            min=0,
            help="Keep this many started sandboxes per task environment ready ahead of resets (bounded by "
            "memory; stopped after 5 idle minutes).",
        ),
    ] = 0,
    jobs_dir: Annotated[
        Path, typer.Option("--jobs-dir", help="Where the serving job's directory goes.")
    ] = Path("jobs"),
    job_name: Annotated[str | None, typer.Option("--job-name", help="Default: serve-<start time>.")] = None,
    harness: Annotated[
        str | None,
        typer.Option("--harness", help="Harness mode: each step is one turn of this harness (needs -m)."),
    ] = None,
    model: Annotated[str | None, typer.Option("-m", "--model", help="The harness's model string.")] = None,
    base_url: Annotated[str | None, typer.Option("--base-url", help="The model server's URL.")] = None,
) -> None:
    """Serve tasks to OpenEnv clients: WebSocket /ws, HTTP /reset /step, /mcp, /health, /metadata, /schema."""
    from evsys.engine.episodes.episode import EpisodeLimits
    from evsys.engine.episodes.service import ServeSettings, build_service
    from evsys.server.run import bind
    from evsys.server.run import serve as run_server

    err = Console(stderr=True, highlight=False, soft_wrap=True)
    if harness is not None and model is None:
        err.print("[bold red]error:[/] --harness needs a model: pass -m (e.g. -m local)")
        raise typer.Exit(2)
    settings = ServeSettings(
        harness=harness,
        max_sessions=max_sessions,
        idle_timeout_sec=idle_timeout,
        limits=EpisodeLimits(max_steps=max_steps, step_timeout_sec=step_timeout),
        max_message_bytes=max_message_bytes,
        warm_sandboxes=warm_sandboxes,
    )
    name = job_name or datetime.now(UTC).strftime("serve-%Y-%m-%d__%H-%M-%S")
    try:
        from evsys.server.app import create_app

        if harness is not None:
            from evsys.engine.episodes.harness import resolve_harness

            resolve_harness(harness)  # an unknown name fails here, not at the first reset
        service = build_service(
            path, settings, job_name=name, jobs_dir=jobs_dir, sandbox=sandbox, model=model, base_url=base_url
        )
        app = create_app(service)
    except (OSError, RuntimeError, ValueError) as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}")
        raise typer.Exit(2) from None
    try:
        sock = bind(host, port)
    except OSError as exc:
        err.print(f"[bold red]error:[/] cannot listen on {host}:{port} ({escape(exc.strerror or str(exc))})")
        raise typer.Exit(2) from None
    bound = sock.getsockname()[1]
    for line in service.catalog.skipped:
        err.print(f"[yellow]skipped:[/] {escape(line)}")
    out = Console(highlight=False, soft_wrap=True)
    out.print(
        f"evsys serve: {len(service.catalog.tasks)} task(s) on ws://{host}:{bound}/ws "
        f"(http://{host}:{bound}/mcp); episodes recorded in {service.catalog.job.job_dir}  (Ctrl-C to stop)"
    )
    try:
        run_server(app, sock, settings, ping_interval=ping_interval)
    except KeyboardInterrupt:
        pass
