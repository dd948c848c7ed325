"""A small ACP agent (stdlib only: it runs on the sandbox's system Python) for the ACP client tests.

Each `session/prompt`: calls the model at $OPENAI_BASE_URL with the session's chat so far, streams the reply
as `agent_message_chunk`, announces a tool call, asks permission (offering allow_always, allow_once and
reject_once), writes `hello.txt` in the session's cwd through `fs/write_text_file`, reads it back, runs
`id -un; cat hello.txt` in a client terminal, reports the terminal's output as the tool call's result and
answers `end_turn`. With `--write <path>` it also tries to write that path and reports the outcome."""

from __future__ import annotations

import json
import os
import sys
import urllib.request

STATE: dict = {"next_id": 1000, "sessions": {}}
WRITE_TARGET = sys.argv[sys.argv.index("--write") + 1] if "--write" in sys.argv else None


def send(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def request(method: str, params: dict) -> dict:
    """Send a request to the client and wait for its response (result or error)."""
    STATE["next_id"] += 1
    ident = STATE["next_id"]
    send({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
    for line in sys.stdin:
        message = json.loads(line)
        if message.get("id") == ident and "method" not in message:
            return message
    raise SystemExit("stdin closed while waiting for the client")


def update(session_id: str, body: dict) -> None:
    send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session_id, "update": body}})


def ask_model(messages: list[dict]) -> str:
    body = {"model": os.environ["EVSYS_MODEL"], "messages": messages, "max_tokens": 8}
    req = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={
            "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
            "Content-Type": "application/json",
        },
    )
    with urllib.request.urlopen(req, timeout=120) as reply:
        return json.loads(reply.read())["choices"][0]["message"]["content"] or ""


def prompt(params: dict) -> dict:
    session_id = params["sessionId"]
    session = STATE["sessions"][session_id]
    text = "".join(block.get("text", "") for block in params["prompt"])
    session["messages"].append({"role": "user", "content": text})
    reply = ask_model(session["messages"])
    session["messages"].append({"role": "assistant", "content": reply})
    update(session_id, {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": reply}})
    call = {"toolCallId": "t1", "title": "write hello.txt", "kind": "edit", "status": "pending"}
    update(session_id, {"sessionUpdate": "tool_call", **call, "rawInput": {"path": "hello.txt"}})
    options = [
        {"optionId": "always", "name": "Always", "kind": "allow_always"},
        {"optionId": "once", "name": "Once", "kind": "allow_once"},
        {"optionId": "no", "name": "No", "kind": "reject_once"},
    ]
    granted = request(
        "session/request_permission", {"sessionId": session_id, "toolCall": call, "options": options}
    )
    path = os.path.join(session["cwd"], "hello.txt")
    request("fs/write_text_file", {"sessionId": session_id, "path": path, "content": "hi from acp\n"})
    read = request("fs/read_text_file", {"sessionId": session_id, "path": path})
    terminal = request(
        "terminal/create",
        {
            "sessionId": session_id,
            "command": "/bin/sh",
            "args": ["-c", "id -un; cat hello.txt"],
            "cwd": session["cwd"],
        },
    )["result"]["terminalId"]
    ids = {"sessionId": session_id, "terminalId": terminal}
    exited = request("terminal/wait_for_exit", ids)["result"]
    output = request("terminal/output", ids)["result"]["output"]
    request("terminal/release", ids)
    result = {
        "permission": granted.get("result"),
        "read": read.get("result"),
        "exit": exited,
        "output": output,
    }
    if WRITE_TARGET:
        attempt = request(
            "fs/write_text_file", {"sessionId": session_id, "path": WRITE_TARGET, "content": "x\n"}
        )
        result["write_attempt"] = {"error": attempt.get("error"), "ok": "result" in attempt}
    done = {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "t1",
        "status": "completed",
        "rawOutput": result,
    }
    update(session_id, done)
    return {"stopReason": "end_turn"}


def handle(message: dict) -> dict:
    method, params = message["method"], message.get("params") or {}
    if method == "initialize":
        info = {"name": "tiny-acp-agent", "version": "1"}
        return {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": [], "agentInfo": info}
    if method == "session/new":
        session_id = f"s{len(STATE['sessions']) + 1}"
        STATE["sessions"][session_id] = {"cwd": params["cwd"], "messages": []}
        return {"sessionId": session_id}
    if method == "session/prompt":
        return prompt(params)
    raise KeyError(method)


def main() -> None:
    for line in sys.stdin:
        message = json.loads(line)
        if "method" not in message or "id" not in message:
            continue  # notifications (session/cancel) and stray responses
        try:
            send({"jsonrpc": "2.0", "id": message["id"], "result": handle(message)})
        except KeyError as exc:
            send({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": f"no {exc}"}})


if __name__ == "__main__":
    main()
