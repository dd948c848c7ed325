"""A tiny but real agent harness for tests: speaks evsys's stdio protocol and the OpenAI API (stdlib only).

Run as `/usr/bin/python3 -I tiny_harness.py [--mode MODE] [--stream] [--no-tools] [--mcp-config PATH]`. It
reads its model endpoint from OPENAI_BASE_URL / OPENAI_API_KEY / EVSYS_MODEL, keeps the whole conversation
across turns, offers the model a `bash` tool and really runs the commands it asks for (in its working
directory), reporting each step as a JSON event line. Modes that misbehave on purpose: `crash` (exits 3 at
start), `silent` (never says ready), `hang` (never finishes a turn), `garbage` (prints non-protocol text),
`die` (exits 5 in the middle of a turn), `flood` (25,000 text events per turn, no model call).
`retry-compact` behaves like a long-running harness: it re-sends its first request (a retry), continues the
conversation, then compacts it (a summary in place of the history) and continues from the summary."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

BASH_TOOL = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a shell command and return its output.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "The command line."}},
            "required": ["command"],
        },
    },
}
MAX_MODEL_CALLS = 2
FLOOD = 25_000  # text events a `flood` turn prints


def emit(kind: str, **fields: object) -> None:
    print(json.dumps({"type": kind, **fields}), flush=True)


def post(path: str, body: dict) -> urllib.request.addinfourl:
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"].rstrip("/") + path,
        data=json.dumps(body).encode(),
        headers={
            "Authorization": f"Bearer {os.environ['OPENAI_API_KEY']}",
            "Content-Type": "application/json",
        },
    )
    return urllib.request.urlopen(request, timeout=120)


def complete(history: list[dict], args: argparse.Namespace) -> dict:
    body = {
        "model": os.environ.get("EVSYS_MODEL", "tiny"),
        "messages": history,
        "temperature": 0,
        "max_tokens": 48,
        "stream": args.stream,
    }
    if not args.no_tools:
        body["tools"] = [BASH_TOOL]
    with post("/chat/completions", body) as response:
        if not args.stream:
            return json.load(response)["choices"][0]["message"]
        return read_stream(response)


def read_stream(response: urllib.request.addinfourl) -> dict:
    message: dict = {"role": "assistant", "content": ""}
    calls: dict[int, dict] = {}
    for raw in response:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        for choice in json.loads(line[6:])["choices"]:
            delta = choice["delta"]
            if delta.get("content"):
                message["content"] += delta["content"]
                emit("llm_chunk", text=delta["content"])
            for part in delta.get("tool_calls") or []:
                call = calls.setdefault(
                    part["index"], {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
                )
                call["id"] = part.get("id") or call["id"]
                call["function"]["name"] += part.get("function", {}).get("name") or ""
                call["function"]["arguments"] += part.get("function", {}).get("arguments") or ""
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message


def run_tool(call: dict) -> str:
    if call["function"]["name"] != "bash":
        return f"unknown tool {call['function']['name']}"
    try:
        command = json.loads(call["function"]["arguments"])["command"]
    except (ValueError, KeyError, TypeError):
        return "error: arguments must be a JSON object with a command"
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=30)
    return done.stdout + done.stderr


def reply(history: list[dict], args: argparse.Namespace) -> dict:
    """One model call; the reply appended to `history` and reported as text output."""
    message = complete(history, args)
    history.append({"role": "assistant", "content": message.get("content") or ""})
    emit("text_output", text=history[-1]["content"])
    return message


def retry_and_compact(history: list[dict], args: argparse.Namespace) -> None:
    """Five calls: a first one, its retry (the same request again), a continuation of the retry, then a
    compacted conversation (summary + the task again) and its continuation."""
    complete(list(history), args)  # the reply a harness gave up on (e.g. it timed out waiting)
    reply(history, args)
    history.append({"role": "user", "content": "Continue."})
    summary = reply(history, args).get("content") or ""
    task = history[0]["content"]
    history[:] = [
        {"role": "system", "content": f"Summary of the conversation so far: {summary}"},
        {"role": "user", "content": task},
    ]
    reply(history, args)
    history.append({"role": "user", "content": "Continue."})
    reply(history, args)


def turn(history: list[dict], content: str, args: argparse.Namespace) -> None:
    mode = args.mode
    history.append({"role": "user", "content": content})
    if mode == "hang":
        time.sleep(3600)
    if mode == "garbage":
        print("Traceback (most recent call last): this is not a protocol line", flush=True)
        time.sleep(3600)
    if mode == "flood":
        for i in range(FLOOD):
            print(json.dumps({"type": "text_output", "text": f"flood {i} " + "x" * 100}))
        emit("turn_complete")
        return
    if mode == "retry-compact":
        retry_and_compact(history, args)
        emit("turn_complete")
        return
    for _ in range(MAX_MODEL_CALLS):
        try:
            message = complete(history, args)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            emit("error", message=f"model call failed: {exc}")
            break
        if mode == "die":
            sys.exit(5)
        history.append({k: v for k, v in message.items() if k in ("role", "content", "tool_calls")})
        if message.get("content"):
            emit("text_output", text=message["content"])
        if not message.get("tool_calls"):
            break
        for call in message["tool_calls"]:
            emit(
                "tool_call",
                id=call["id"],
                name=call["function"]["name"],
                arguments=call["function"]["arguments"],
            )
            output = run_tool(call)
            emit("tool_result", id=call["id"], output=output)
            history.append({"role": "tool", "tool_call_id": call["id"], "content": output})
    emit("turn_complete")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--mode",
        default="normal",
        choices=["normal", "crash", "silent", "hang", "garbage", "die", "flood", "retry-compact"],
    )
    parser.add_argument("--stream", action="store_true", help="read the model's reply as SSE chunks")
    parser.add_argument("--no-tools", action="store_true", help="do not offer the model the bash tool")
    parser.add_argument("--mcp-config")
    args = parser.parse_args()
    if args.mode == "crash":
        print("fatal: tiny-harness cannot find its configuration", file=sys.stderr, flush=True)
        return 3
    if args.mode == "silent":
        time.sleep(3600)
    servers = {}
    if args.mcp_config and os.path.exists(args.mcp_config):
        with open(args.mcp_config) as f:
            servers = json.load(f)["mcpServers"]
    emit("ready", name="tiny-harness", env=sorted(os.environ), mcp_servers=servers)
    history: list[dict] = []
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        if request.get("type") != "message":
            emit("error", message=f"unknown request type {request.get('type')!r}")
            continue
        turn(history, request["content"], args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
