"""`evsys model ...`: serve the local engine over an OpenAI-compatible API, inspect model strings.

Heavy libraries (torch, transformers, fastapi, uvicorn) are imported inside the commands, never at import.
"""

from __future__ import annotations

import socket
from typing import Any

import typer

from evsys.util.net import listening_socket

model_app = typer.Typer(no_args_is_help=True)


@model_app.command("serve")
def serve(
    model: str = typer.Option(
        "local", "--model", "-m", help="A local model string: local or local:/path/to/hf-dir."
    ),
    host: str = typer.Option("127.0.0.1", help="Interface to bind (127.0.0.1 keeps it private)."),
    port: int = typer.Option(8000, help="TCP port."),
    served_model_name: str = typer.Option(
        None, "--served-model-name", help="Name clients pass as `model` (default: the -m string)."
    ),
) -> None:
    """Serve a local model with OpenAI-compatible /v1/chat/completions, /v1/completions and /v1/models.

    Chat completions take tools with tool_choice auto, none, required or a named function, and a JSON
    response_format (json_object, json_schema), both enforced by constrained decoding; also n, logprobs,
    top_logprobs, stream and return_token_ids (docs/models.md)."""
    import asyncio

    from rich.console import Console

    from evsys.model.spec import ModelSpec

    console = Console(stderr=True)
    try:
        spec = ModelSpec.parse(model)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--model") from exc
    if spec.provider != "local":
        raise typer.BadParameter(
            f"serve runs the local engine; got provider {spec.provider!r}", param_hint="--model"
        )
    import uvicorn

    from evsys.model import ModelError
    from evsys.model.local.client import LocalModelClient
    from evsys.model.serve import create_app

    listener = _bind(console, host, port)  # before loading: a busy port fails at once, never after "serving"
    client = LocalModelClient(spec.model)
    name = served_model_name or str(spec)
    console.print(f"loading {spec} ...")
    try:
        engine = asyncio.run(client.engine())
    except ModelError as exc:
        listener.close()
        console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    console.print(
        f"serving [bold]{name}[/] (context {engine.context_window} tokens) on http://{host}:{port}/v1"
    )
    config = uvicorn.Config(create_app(client, name), log_level="warning", timeout_graceful_shutdown=5)
    _engine_server(config, client).run(sockets=[listener])


def _engine_server(config: Any, client: Any) -> Any:
    """A uvicorn server that, on Ctrl-C or SIGTERM, first stops the engine: in-flight requests end at once
    with 503 instead of holding the shutdown until their generations finish."""
    import uvicorn

    class EngineServer(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            client.shared.close()
            super().handle_exit(sig, frame)

    return EngineServer(config)


def _bind(console: Any, host: str, port: int) -> socket.socket:
    """A listening socket on host:port; exit 2 with one line when it is taken or not allowed."""
    try:
        listener = listening_socket(host, port, backlog=2048)
    except OSError as exc:
        console.print(
            f"[bold red]error:[/] cannot listen on {host}:{port}: {exc.strerror or exc} "
            "(choose another --port)",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(2) from None
    listener.set_inheritable(True)
    return listener


@model_app.command("check")
def check(
    model: str = typer.Argument(..., help="A model string, e.g. local, openai:gpt-4.1, vllm:Qwen/Qwen3-8B."),
    base_url: str = typer.Option(None, "--base-url", help="Server base URL for OpenAI-compatible providers."),
    prompt: str = typer.Option("Say hello.", help="A one-line prompt to send."),
    max_tokens: int = typer.Option(32, help="Tokens to generate."),
) -> None:
    """Send one prompt to a model and print the reply, token counts and speed."""
    import asyncio

    from rich.console import Console

    from evsys.model import ModelError, SamplingParams, create_model_client

    console = Console()

    async def run() -> None:
        client = create_model_client(model, base_url=base_url)
        try:
            done = await client.complete(
                [{"role": "user", "content": prompt}],
                params=SamplingParams(temperature=0, max_tokens=max_tokens),
            )
        finally:
            await client.aclose()
        console.print(done.text or done.raw_text or "")
        rate = done.usage.completion_tokens / done.latency_s if done.latency_s else 0.0
        console.print(
            f"[dim]{done.usage.prompt_tokens} prompt + {done.usage.completion_tokens} completion tokens, "
            f"finish={done.finish_reason}, {done.latency_s:.2f} s ({rate:.1f} tokens/s)[/]"
        )

    try:
        asyncio.run(run())
    except (ModelError, ValueError) as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from exc


@model_app.command("providers")
def providers() -> None:
    """List the model providers (`provider[:model]`): built-ins and installed `evsys.models` entry points."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from evsys.model import model_provider, model_provider_names
    from evsys.util.registry import PluginLoadError

    table = Table("provider", "default base URL", "description")
    for name in model_provider_names():
        try:
            defaults = model_provider(name).defaults
        except PluginLoadError as exc:
            table.add_row(name, "", f"[red]cannot be loaded: {escape(str(exc))}[/red]")
            continue
        table.add_row(name, defaults.base_url or "", escape(defaults.description))
    Console().print(table)
