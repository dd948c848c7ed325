"""Listening TCP sockets for evsys's own servers (the model proxy, `evsys serve`, the viewer, `evsys model
serve`)."""

from __future__ import annotations

import socket


def listening_socket(host: str, port: int, *, backlog: int = 1024) -> socket.socket:
    """A TCP socket listening on `host:port` (port 0 picks a free one; an IPv6 host gets an IPv6 socket);
    `OSError` when the address is taken or not allowed, the socket closed. Made with `IPPROTO_TCP` and
    TCP_NODELAY, so accepted connections do not hold small replies back (Nagle's ~40 ms)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock
