"""A stdio <-> HTTP MCP relay that runs inside a sandbox (standard library only, run as `python3 -I -c`).

`python3 -I -c <this file's source> streamable-http|sse URL HEADERS_JSON`: JSON-RPC messages arrive one per
line on stdin and go to the server; the server's messages are printed one per line. Running it inside the
trial's sandbox is what makes a task's HTTP MCP server "reached from the sandbox": the request leaves from the
sandbox's own network namespace, so the task's network mode decides what it can reach.

- `streamable-http`: each message is one POST (`Accept: application/json, text/event-stream`); the reply is a
  JSON body or an event stream whose `data:` lines are messages; the server's `Mcp-Session-Id` is sent back.
- `sse` (the older transport): a GET opens the event stream; its `endpoint` event names the URL messages are
  POSTed to; `message` events carry the server's messages.

Errors go to stderr and end the relay (exit 1), which the client sees as a closed connection."""

import json
import sys
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator
from typing import Any

TIMEOUT = 300


def emit(text: str) -> None:
    """Print one server message (a JSON text) on its own line."""
    sys.stdout.write(text.strip().replace("\n", " ") + "\n")
    sys.stdout.flush()


def events(response: Iterable[bytes]) -> Iterator[tuple[str, str]]:
    """(event name, data) pairs of an event stream."""
    name, data = "message", list[str]()
    for raw in response:
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not line:
            if data:
                yield name, "\n".join(data)
            name, data = "message", list[str]()
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())
    if data:
        yield name, "\n".join(data)


def request(
    url: str,
    headers: dict[str, str],
    body: bytes | None = None,
    accept: str = "application/json, text/event-stream",
) -> Any:
    """One HTTP request (POST with a body, GET without); the open response."""
    method = "POST" if body is not None else "GET"
    all_headers = {**headers, "Accept": accept}
    if body is not None:
        all_headers["Content-Type"] = "application/json"
    req = urllib.request.Request(url, data=body, headers=all_headers, method=method)
    return urllib.request.urlopen(req, timeout=TIMEOUT)


def streamable_http(url: str, headers: dict[str, str]) -> None:
    """Relay over the Streamable HTTP transport (one POST per message)."""
    session: dict[str, str] = {}
    for line in sys.stdin:
        if not line.strip():
            continue
        with request(url, {**headers, **session}, line.encode()) as response:
            sid = response.headers.get("Mcp-Session-Id")
            if sid:
                session["Mcp-Session-Id"] = sid
            kind = response.headers.get("Content-Type", "")
            if kind.startswith("text/event-stream"):
                for name, data in events(response):
                    if name == "message" and data:
                        emit(data)
            else:
                text = response.read().decode("utf-8", "replace")
                if text.strip():
                    emit(text)


def sse(url: str, headers: dict[str, str]) -> None:
    """Relay over the SSE transport (a GET event stream, messages POSTed to its endpoint)."""
    stream = request(url, headers, accept="text/event-stream")
    found = threading.Event()
    target: dict[str, str] = {}

    def read() -> None:
        for name, data in events(stream):
            if name == "endpoint":
                target["url"] = urllib.parse.urljoin(url, data.strip())
                found.set()
            elif name == "message" and data:
                emit(data)
        found.set()
        sys.stderr.write("the MCP server closed its event stream\n")
        sys.stderr.flush()

    threading.Thread(target=read, daemon=True).start()
    if not found.wait(TIMEOUT) or "url" not in target:
        raise SystemExit("the MCP server sent no endpoint event")
    for line in sys.stdin:
        if line.strip():
            request(target["url"], headers, line.encode()).close()


def main() -> None:
    """Relay until stdin ends or the connection fails."""
    transport, url, headers = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    try:
        (sse if transport == "sse" else streamable_http)(url, headers)
    except Exception as exc:
        sys.stderr.write(f"MCP relay to {url}: {type(exc).__name__}: {exc}\n")
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
