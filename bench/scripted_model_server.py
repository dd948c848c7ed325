"""A scripted OpenAI-compatible chat-completions server for benchmarks: fixed latency, no model.

Binds 127.0.0.1 only. Every `POST /v1/chat/completions` sleeps `--latency` seconds, then answers: a `bash`
tool call running the command from the last user message's "Run: <command>" line while the chat holds no
tool result yet, else a final answer without a tool call (so the loop agent makes exactly two calls per
trial). Answers carry token ids (`prompt_token_ids`, `token_ids`) like vLLM's with `return_token_ids`, so
the client parses what it would against a real server. `GET /v1/models` lists the one model.

Run: `python bench/scripted_model_server.py --latency 0.5` prints `port <n>` once it listens.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json

from aiohttp import web

COMMAND_PREFIX = "Run: "
_ids = itertools.count()


def _command(messages: list[dict]) -> str:
    """The command named by the last user message ("Run: <command>"), or `true`."""
    for message in reversed(messages):
        if message.get("role") == "user":
            for line in str(message.get("content") or "").splitlines():
                if line.startswith(COMMAND_PREFIX):
                    return line.removeprefix(COMMAND_PREFIX).strip()
    return "true"


def completion(request: dict) -> dict:
    """The scripted answer to one chat-completions request."""
    messages = request.get("messages") or []
    done = any(m.get("role") == "tool" for m in messages)
    n = next(_ids)
    message: dict = {"role": "assistant", "content": "Done." if done else ""}
    if not done:
        arguments = json.dumps({"command": _command(messages)})
        call = {"id": f"call_{n}", "type": "function", "function": {"name": "bash", "arguments": arguments}}
        message["tool_calls"] = [call]
    completion_ids = [1, 2, 3, 4]
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": 0,
        "model": request.get("model") or "scripted",
        "prompt_token_ids": list(range(10 + 4 * len(messages))),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "stop" if done else "tool_calls",
                "token_ids": completion_ids,
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": 10 + 4 * len(messages), "completion_tokens": len(completion_ids)},
    }


def make_app(latency: float) -> web.Application:
    """The aiohttp application answering after `latency` seconds."""

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        await asyncio.sleep(latency)
        return web.json_response(completion(body))

    async def models(_request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "scripted", "object": "model"}]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    return app


async def serve(latency: float, port: int) -> None:
    """Listen on 127.0.0.1:`port` (0: any free port), print the port, serve until killed."""
    runner = web.AppRunner(make_app(latency), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, backlog=4096)
    await site.start()
    sockets = site._server.sockets if site._server else []  # type: ignore[union-attr]
    print(f"port {sockets[0].getsockname()[1]}", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    """Parse the flags and serve."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.5, help="seconds before each answer")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    asyncio.run(serve(args.latency, args.port))


if __name__ == "__main__":
    main()
