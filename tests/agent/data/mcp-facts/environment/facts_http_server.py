"""The facts MCP server over HTTP (standard library only), for tests: Streamable HTTP at `/mcp` (JSON replies)
and the older SSE transport (`GET /sse`, messages POSTed to `/messages`). Prints `listening <port>` once
ready. Run as `python3 facts_http_server.py` next to facts_server.py."""

import json
import os
import queue
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from facts_server import answer

STREAMS: "queue.Queue[str]" = queue.Queue()


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.path != "/sse":
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.wfile.write(b"event: endpoint\ndata: /messages?session=1\n\n")
        self.wfile.flush()
        while True:
            message = STREAMS.get()
            self.wfile.write(f"event: message\ndata: {message}\n\n".encode())
            self.wfile.flush()

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        reply = answer(request)
        if self.path.startswith("/messages"):
            if reply is not None:
                STREAMS.put(json.dumps(reply))
            self.send_response(202)
            self.end_headers()
            return
        if self.path != "/mcp" or self.headers.get("Authorization") != "Bearer s3cret":
            self.send_error(401 if self.path == "/mcp" else 404)
            return
        if reply is None:
            self.send_response(202)
            self.end_headers()
            return
        body = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Mcp-Session-Id", "s-1")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(f"listening {server.server_address[1]}", flush=True)
server.serve_forever()
