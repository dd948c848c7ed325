"""Codex CLI (npm `@openai/codex`) as an evsys harness: one `codex exec` process per turn, via the proxy.

Turn 1 runs `codex exec --json ... -` and later turns `codex exec resume --last --json ... -` (the message is
read from stdin, so no message can be mistaken for a flag). `prepare()` writes `$CODEX_HOME/config.toml`: a
model provider `evsys` pointing at the proxy endpoint (`wire_api = "responses"`, the key read from
`EVSYS_CODEX_API_KEY`), no approvals, no Codex sandbox (`danger-full-access`: the evsys sandbox is the
boundary, and Codex's own landlock/seccomp sandbox cannot nest in it), no update check, analytics, feedback
or telemetry export, and an `[mcp_servers.<name>]` entry per MCP server: the injected environment tools' (URL
and bearer header) and the task's own (`command`/`args` for stdio servers, `url`/`http_headers` otherwise;
Codex speaks streamable HTTP, so an `sse` server is given by its URL all the same).

`codex exec --json` prints one JSON event per line (`thread.started`, `turn.started`, `item.started` /
`item.completed` for agent messages, command executions, MCP tool calls, file changes, ..., `turn.completed`
with usage, `turn.failed`, `error`); `parse_line` maps them onto `HarnessEvent`s. `native_log_to_steps`
converts Codex's own session log (`$CODEX_HOME/sessions/**/rollout-*.jsonl`) into ATIF steps; `native_steps`
reads the thread's log out of the sandbox for the trial's `agent/` directory.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from evsys.agent.harness.catalog import HarnessDefinition, HarnessSetup
from evsys.agent.harness.config import HarnessConfig
from evsys.agent.harness.events import HarnessEvent, HarnessEventType
from evsys.agent.harness.install import HarnessInstall
from evsys.agent.harness.per_turn import PerTurnHarnessAdapter
from evsys.agent.harness.stdio import ProtocolViolation
from evsys.agent.harness.turns import json_object
from evsys.records import Observation, ObservationResult, Step, StepMetrics, StepSource, ToolCall

CODEX_VERSION = "0.169.0"
PROVIDER_ID = "evsys"
API_KEY_VAR = "EVSYS_CODEX_API_KEY"
EXEC_FLAGS = ["--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"]
CODEX_BUILTIN_TOOLS = frozenset(
    {
        "exec_command",
        "write_stdin",
        "shell",
        "apply_patch",
        "view_image",
        "update_plan",
        "request_user_input",
        "web_search",
        "get_goal",
        "create_goal",
        "update_goal",
    }
)

INSTALL = HarnessInstall(
    manager="npm", packages=[f"@openai/codex@{CODEX_VERSION}"], prefix="/opt/evsys-harness/codex"
)


def _toml_string(value: str) -> str:
    """A TOML basic string (JSON string escapes are valid TOML escapes)."""
    return json.dumps(value)


def render_config(
    *,
    base_url: str,
    model: str,
    mcp_servers: dict[str, dict[str, Any]] | None = None,
) -> str:
    """The `config.toml` that points Codex at `base_url` (no `/v1`) and turns off what needs the network."""
    lines = [
        f"model = {_toml_string(model)}",
        f"model_provider = {_toml_string(PROVIDER_ID)}",
        'approval_policy = "never"',
        'sandbox_mode = "danger-full-access"',
        "check_for_update_on_startup = false",
        "",
        f"[model_providers.{PROVIDER_ID}]",
        'name = "evsys proxy"',
        f"base_url = {_toml_string(base_url.rstrip('/') + '/v1')}",
        f"env_key = {_toml_string(API_KEY_VAR)}",
        'wire_api = "responses"',
        "request_max_retries = 1",
        "stream_max_retries = 1",
        "",
        "[analytics]",
        "enabled = false",
        "",
        "[feedback]",
        "enabled = false",
        "",
        "[otel]",
        'exporter = "none"',
    ]
    for name, entry in (mcp_servers or {}).items():
        lines += ["", f"[mcp_servers.{_toml_string(name)}]", *_mcp_server_toml(entry)]
    return "\n".join(lines) + "\n"


def _mcp_server_toml(entry: dict[str, Any]) -> list[str]:
    """The keys of one `[mcp_servers.<name>]` table from a common `mcpServers` entry."""
    if entry["type"] == "stdio":
        args = ", ".join(_toml_string(str(a)) for a in entry.get("args") or [])
        return [f"command = {_toml_string(str(entry['command']))}", f"args = [{args}]"]
    headers = ", ".join(
        f"{_toml_string(k)} = {_toml_string(v)}" for k, v in (entry.get("headers") or {}).items()
    )
    return [
        f"url = {_toml_string(str(entry['url']))}",
        f"http_headers = {{ {headers} }}" if headers else "http_headers = {}",
    ]


class CodexAdapter(PerTurnHarnessAdapter):
    """Runs `codex exec` (turn 1) and `codex exec resume --last` (later turns) against the proxy."""

    builtin_tools = CODEX_BUILTIN_TOOLS

    def __init__(self, config: HarnessConfig, *, home: str, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        self.home = home.rstrip("/")
        self.codex_home = f"{self.home}/.codex"
        self.thread_id: str | None = None
        self.usage: dict[str, Any] | None = None

    @property
    def codex(self) -> str:
        """The codex executable (`config.command[0]`)."""
        return self.config.command[0]

    def render_mcp_config(self) -> bytes | None:
        """Nothing: Codex reads its MCP servers from config.toml, written by `prepare()`."""
        return None

    def turn_argv(self, message: str, turn: int) -> list[str]:
        """`codex exec [resume --last] --json ... -` (the message comes on stdin)."""
        resume = ["resume", "--last"] if turn > 1 else []
        return [self.codex, "exec", *resume, *EXEC_FLAGS, *self.config.command[1:], "-"]

    def turn_stdin(self, message: str, turn: int) -> bytes | None:
        """The user's message."""
        return message.encode()

    def environment(self) -> dict[str, str]:
        """HOME and CODEX_HOME, the proxy key under `API_KEY_VAR`, then the config's own variables."""
        path = f"{self._bin_dir()}:/usr/local/bin:/usr/bin:/bin"
        env = {"HOME": self.home, "CODEX_HOME": self.codex_home, "PATH": path, "NO_COLOR": "1"}
        if self.endpoint is not None:
            env[API_KEY_VAR] = self.endpoint.api_key
        return {**env, **self.config.env_vars}

    def _bin_dir(self) -> str:
        return self.codex.rpartition("/")[0] or "/usr/bin"

    async def prepare(self) -> None:
        """Write `$CODEX_HOME/config.toml` (provider, no sandbox/approvals/telemetry, MCP server)."""
        if self.endpoint is None:
            raise ValueError("the codex harness needs a model endpoint (the proxy session)")
        text = render_config(
            base_url=self.endpoint.base_url,
            model=self.config.model or self.endpoint.model,
            mcp_servers=self.mcp_server_entries(),
        )
        await self.launcher.write_file(f"{self.codex_home}/config.toml", text.encode())

    async def native_steps(self) -> list[Step]:
        """This thread's own rollout log (`$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*-<thread id>.jsonl`, every
        turn of the thread) as ATIF steps; [] before the first turn started a thread."""
        thread, home = self.thread_id or "", self.codex_home
        if not re.fullmatch(r"[0-9A-Za-z-]+", thread) or re.search(r"[\s*?\[]", home):
            return []
        pattern = f"{home}/sessions/*/*/*/rollout-*-{thread}.jsonl"
        process = await self.launcher.launch(["/bin/sh", "-c", "cat -- $1", "sh", pattern], env={}, cwd="/")
        data = await process.stdout.read()
        await process.wait()
        return native_log_to_steps(data.splitlines())

    def parse_line(self, line: bytes, turn: int) -> list[HarnessEvent]:
        """One `codex exec --json` line as events; ProtocolViolation if it is not a JSON event."""
        try:
            obj = json.loads(line)
        except ValueError:
            obj = None
        if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
            raise ProtocolViolation(f"expected a codex JSON event line, got {line[:200]!r}")
        kind = obj["type"]
        if kind == "thread.started":
            self.thread_id = obj.get("thread_id")
        elif kind == "turn.completed":
            self.usage = obj.get("usage")
        elif kind in ("item.started", "item.completed", "item.updated"):
            return [HarnessEvent(type=t, data=d, turn=turn) for t, d in _item_events(kind, obj.get("item"))]
        elif kind in ("turn.failed", "error"):
            error = obj.get("error") if kind == "turn.failed" else obj
            message = error.get("message") if isinstance(error, dict) else str(error)
            return [
                HarnessEvent(type=HarnessEventType.ERROR, data={"kind": kind, "message": message}, turn=turn)
            ]
        return []


def _item_events(kind: str, item: Any) -> list[tuple[HarnessEventType, dict[str, Any]]]:
    """Events for one `item.*` line (started: tool calls; completed: text, results, errors)."""
    if not isinstance(item, dict):
        return []
    item_type, item_id = item.get("type"), item.get("id")
    started = kind == "item.started"
    if item_type == "command_execution":
        if started:
            return [
                (HarnessEventType.TOOL_CALL, {"id": item_id, "name": "shell", "command": item.get("command")})
            ]
        if kind == "item.completed":
            result = {"id": item_id, "name": "shell", "output": item.get("aggregated_output", "")}
            return [(HarnessEventType.TOOL_RESULT, {**result, "exit_code": item.get("exit_code")})]
    elif item_type == "mcp_tool_call":
        call = {"id": item_id, "name": item.get("tool"), "server": item.get("server")}
        if started:
            return [(HarnessEventType.TOOL_CALL, {**call, "arguments": item.get("arguments")})]
        if kind == "item.completed":
            return [
                (
                    HarnessEventType.TOOL_RESULT,
                    {**call, "output": item.get("result"), "error": item.get("error")},
                )
            ]
    elif kind != "item.completed":
        return []
    elif item_type == "agent_message":
        return [(HarnessEventType.TEXT_OUTPUT, {"id": item_id, "text": item.get("text", "")})]
    elif item_type == "reasoning":
        return [(HarnessEventType.LLM_CHUNK, {"id": item_id, "reasoning": item.get("text", "")})]
    elif item_type == "file_change":
        data = {
            "id": item_id,
            "name": "apply_patch",
            "changes": item.get("changes"),
            "status": item.get("status"),
        }
        return [(HarnessEventType.TOOL_RESULT, data)]
    elif item_type == "error":
        return [
            (HarnessEventType.ERROR, {"id": item_id, "kind": "warning", "message": item.get("message", "")})
        ]
    return []


# -- ATIF from Codex's session log --------------------------------------------------------------------


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = [p.get("text", "") for p in content or [] if isinstance(p, dict)]
    return "".join(str(p) for p in parts)


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        parsed = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        parsed = None
    return parsed if isinstance(parsed, dict) else {"raw": raw}


class _StepBuilder:
    """Accumulates ATIF steps from rollout records in order."""

    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.by_call: dict[str, Step] = {}
        self.open_agent: Step | None = None  # the agent step of the response being read
        self.reasoning: list[str] = []

    def add(self, source: StepSource, timestamp: str, message: str = "") -> Step:
        step = Step(step_id=len(self.steps) + 1, timestamp=timestamp, source=source, message=message)
        self.steps.append(step)
        return step

    def agent_step(self, timestamp: str) -> Step:
        if self.open_agent is None:
            self.open_agent = self.add("agent", timestamp)
            if self.reasoning:
                self.open_agent.reasoning_content, self.reasoning = "\n".join(self.reasoning), []
        return self.open_agent

    def item(self, payload: dict[str, Any], timestamp: str) -> None:
        kind = payload.get("type")
        if kind == "message":
            self.message(payload, timestamp)
        elif kind in ("function_call", "custom_tool_call", "local_shell_call"):
            step = self.agent_step(timestamp)
            call_id = str(payload.get("call_id") or payload.get("id") or "")
            raw = payload.get("arguments", payload.get("input", payload.get("action")))
            call = ToolCall(
                tool_call_id=call_id, function_name=str(payload.get("name", kind)), arguments=_arguments(raw)
            )
            step.tool_calls = [*(step.tool_calls or []), call]
            self.by_call[call_id] = step
        elif kind in ("function_call_output", "custom_tool_call_output"):
            self.open_agent = None
            owner = self.by_call.get(str(payload.get("call_id")))
            if owner is not None:
                owner.observation = owner.observation or Observation()
                output = payload.get("output")
                content = output if isinstance(output, str) else _content_text(output)
                owner.observation.results.append(
                    ObservationResult(source_call_id=payload.get("call_id"), content=content)
                )
        elif kind == "reasoning":
            summary = [_content_text([s]) for s in payload.get("summary") or []]
            self.reasoning.extend(s for s in summary if s)

    def message(self, payload: dict[str, Any], timestamp: str) -> None:
        role, text = payload.get("role"), _content_text(payload.get("content"))
        if role == "assistant":
            step = self.agent_step(timestamp)
            step.message = f"{step.message}\n{text}" if step.message else text
            return
        self.open_agent = None
        self.add("system" if role in ("developer", "system") else "user", timestamp, text)

    def usage(self, usage: dict[str, Any]) -> None:
        """Token counts of one model response, on the agent step it produced."""
        step = self.open_agent or next((s for s in reversed(self.steps) if s.source == "agent"), None)
        if step is not None and step.metrics is None:
            step.metrics = StepMetrics(
                prompt_tokens=usage.get("input_tokens"),
                completion_tokens=usage.get("output_tokens"),
                cached_tokens=usage.get("cached_input_tokens"),
            )
        self.open_agent = None


def native_log_to_steps(lines: Iterable[str | bytes | dict[str, Any]]) -> list[Step]:
    """ATIF steps from Codex's rollout log: system/user messages, one agent step per model response (text,
    tool calls, reasoning summary, token counts), tool outputs as the observation of the calling step.

    Lines that are not JSON objects are skipped (a log cut short by a killed process stays readable)."""
    builder = _StepBuilder()
    for line in lines:
        record = line if isinstance(line, dict) else json_object(line)
        if record is None:
            continue
        payload = record.get("payload")
        if not isinstance(payload, dict):
            continue
        timestamp = str(record.get("timestamp") or "")
        if record.get("type") == "response_item":
            builder.item(payload, timestamp)
        elif record.get("type") == "token_usage_record" and isinstance(payload.get("usage"), dict):
            builder.usage(payload["usage"])
    return builder.steps


def build(setup: HarnessSetup) -> CodexAdapter:
    """A Codex adapter for a trial sandbox (`-a codex`); option `model` overrides the model name."""
    config = HarnessConfig(
        name="codex",
        command=[f"{setup.bin_dir}/codex"],
        working_directory=setup.workdir,
        session_timeout_s=setup.session_timeout_s,
        model=setup.options.get("model"),
        api_key_env_var=API_KEY_VAR,
    )
    return CodexAdapter(
        config,
        home=setup.home,
        launcher=setup.launcher,
        endpoint=setup.endpoint,
        mcp=setup.mcp,
        mcp_servers=setup.mcp_servers,
    )


DEFINITION = HarnessDefinition(
    name="codex",
    install=INSTALL,
    build=build,
    dialect="responses",
    description="OpenAI Codex CLI (codex exec per turn, Responses API through the evsys proxy)",
)
