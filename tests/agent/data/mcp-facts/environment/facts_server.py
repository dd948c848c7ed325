"""A tiny MCP server over stdio (JSON-RPC lines, standard library only) with one tool, `lookup_fact`.

Every call it serves is appended to /app/facts-calls.jsonl, which the task's test reads."""

import json
import sys

TOOL = {
    "name": "lookup_fact",
    "description": "Look up a fact about a topic.",
    "inputSchema": {"type": "object", "properties": {"topic": {"type": "string"}}, "required": ["topic"]},
}


def answer(request: dict) -> dict | None:
    method, params = request.get("method"), request.get("params") or {}
    if "id" not in request:
        return None  # a notification
    if method == "initialize":
        version = params.get("protocolVersion", "2025-06-18")
        result = {
            "protocolVersion": version,
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "facts", "version": "1.0"},
        }
    elif method == "tools/list":
        result = {"tools": [TOOL]}
    elif method == "tools/call" and params.get("name") == "lookup_fact":
        topic = str((params.get("arguments") or {}).get("topic", ""))
        with open("/app/facts-calls.jsonl", "a") as log:
            log.write(json.dumps({"topic": topic}) + "\n")
        result = {
            "content": [{"type": "text", "text": f"A {topic} is a small citrus fruit."}],
            "isError": False,
        }
    elif method == "ping":
        result = {}
    else:
        error = {"code": -32601, "message": f"unknown method {method!r}"}
        return {"jsonrpc": "2.0", "id": request["id"], "error": error}
    return {"jsonrpc": "2.0", "id": request["id"], "result": result}


def main() -> None:
    for line in sys.stdin:
        if line.strip():
            reply = answer(json.loads(line))
            if reply is not None:
                print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
