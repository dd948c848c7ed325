"""A tiny TCP-to-unix-socket forwarder that runs inside a no-network sandbox (stdlib only, no evsys imports).

A harness in a sandbox with its own network namespace (only `lo`) cannot reach the host's proxy port.
evsys binds the session's proxy unix socket into the sandbox and starts this script there:

    /usr/bin/python3 -I forwarder.py --listen 127.0.0.1:8765 --uds /run/evsys/proxy.sock

It listens on the loopback address of the sandbox's own network namespace and copies bytes both ways
between each accepted connection and a fresh connection to the unix socket. The harness is then pointed at
`http://127.0.0.1:8765/v1`. When ready it prints one line, `listening <host>:<port>`, to stdout (with port
0 the kernel picks the port and the line tells which)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Awaitable, Callable

CHUNK = 65536


async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until EOF, then half-close the other side so the peer sees the end of the request/response."""
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass


async def close_writer(writer: asyncio.StreamWriter) -> None:
    """Close `writer` and wait for it, ignoring a peer that is already gone."""
    writer.close()
    with contextlib.suppress(ConnectionError, OSError):
        await writer.wait_closed()


def make_handler(uds: str) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
    """The connection handler: connect to `uds` and forward both directions until both are done."""

    async def handle(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_unix_connection(uds)
        except OSError as exc:
            print(f"forwarder: cannot connect to {uds}: {exc}", file=sys.stderr, flush=True)
            await close_writer(client_writer)
            return
        try:
            await asyncio.gather(pump(client_reader, upstream_writer), pump(upstream_reader, client_writer))
        finally:
            await close_writer(upstream_writer)
            await close_writer(client_writer)

    return handle


async def serve(host: str, port: int, uds: str) -> None:
    """Listen on host:port, forward to `uds`, announce readiness on stdout, run until killed."""
    server = await asyncio.start_server(make_handler(uds), host, port)
    bound = server.sockets[0].getsockname()
    print(f"listening {bound[0]}:{bound[1]}", flush=True)
    async with server:
        await server.serve_forever()


def parse_args(argv: list[str]) -> argparse.Namespace:
    """--listen HOST:PORT (default 127.0.0.1:0) and --uds PATH."""
    parser = argparse.ArgumentParser(description="Forward TCP connections to a unix socket.")
    parser.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT to listen on")
    parser.add_argument("--uds", required=True, help="unix socket to forward to")
    args = parser.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    if not host or not port.isdigit():
        parser.error(f"--listen must be HOST:PORT, got {args.listen!r}")
    args.host, args.port = host, int(port)
    return args


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        asyncio.run(serve(args.host, args.port, args.uds))
    except KeyboardInterrupt:
        return 0
    except OSError as exc:
        print(f"forwarder: cannot listen on {args.listen}: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
