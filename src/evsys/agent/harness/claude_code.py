"""Claude Code (npm `@anthropic-ai/claude-code`) as an evsys harness: one long-lived process, stream-json
on stdin/stdout, every model call through the proxy's Anthropic `/v1/messages` endpoint.

The process runs `claude -p --input-format stream-json --output-format stream-json --verbose
--replay-user-messages --dangerously-skip-permissions --permission-prompts none --mcp-config <file>
--strict-mcp-config --model <model>` with a writable HOME and only flags and environment for configuration:
`ANTHROPIC_BASE_URL` (the proxy endpoint, no `/v1`), the session key as `ANTHROPIC_API_KEY` (sent as
`x-api-key`), the model for every role (`ANTHROPIC_MODEL`, the opus/sonnet/haiku defaults, subagents), and
the switches that stop non-model traffic (telemetry, auto-update, error reporting, feedback surveys).

Readiness: Claude Code prints its `system`/`init` line only once a message arrives (and again at the start
of every turn), so `start()` sends the stream-json `initialize` control request instead and waits for its
`control_response`. Each turn is one `user` line; the turn's lines map onto events (assistant text ->
TEXT_OUTPUT, `tool_use` -> TOOL_CALL, `tool_result` -> TOOL_RESULT, thinking -> LLM_CHUNK, a Claude Code
API-error message -> ERROR) and the `result` line ends it with TURN_COMPLETE.

Turn status: "ok" unless the result says `is_error` for a reason outside the model's behaviour (the
endpoint refused or failed, the harness broke). When the model itself ran into a limit (its replies kept
hitting the output-token cap, the turn or budget limit), the turn completed and the workspace is what the
model made of it: status "ok", with `data["limit"]` saying which limit (Claude Code's own API-error message,
if it printed one, is an ERROR event of kind "api_error").

`native_log_to_steps` converts the stream-json output (kept by the adapter as `native_log`) or Claude Code's
own session file (`$HOME/.claude/projects/<cwd>/<session>.jsonl`) into ATIF steps."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from evsys.agent.harness.adapter import HarnessStartError
from evsys.agent.harness.catalog import HarnessDefinition, HarnessSetup
from evsys.agent.harness.config import HarnessConfig
from evsys.agent.harness.events import HarnessEvent, HarnessEventType
from evsys.agent.harness.install import HarnessInstall
from evsys.agent.harness.process import HarnessProcess
from evsys.agent.harness.stdio import StdioHarnessAdapter
from evsys.agent.harness.turns import json_object
from evsys.records import Observation, ObservationResult, Step, StepMetrics, StepSource, ToolCall

CLAUDE_CODE_VERSION = "2.1.330"
SERVER_NAME = "evsys-env"
INIT_REQUEST_ID = "evsys-initialize"
STREAM_FLAGS = [
    *("-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose"),
    *("--replay-user-messages", "--dangerously-skip-permissions", "--permission-prompts", "none"),
]
QUIET_ENV = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_BUG_COMMAND": "1",
    "DISABLE_INSTALLATION_CHECKS": "1",
    "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
    "IS_SANDBOX": "1",  # it runs inside the evsys sandbox (lets --dangerously-skip-permissions run as root)
    "NO_COLOR": "1",
}
MODEL_ROLE_VARS = (
    "ANTHROPIC_MODEL",
    "ANTHROPIC_DEFAULT_OPUS_MODEL",
    "ANTHROPIC_DEFAULT_SONNET_MODEL",
    "ANTHROPIC_DEFAULT_HAIKU_MODEL",
    "ANTHROPIC_SMALL_FAST_MODEL",
    "CLAUDE_CODE_SUBAGENT_MODEL",
)
# A turn that ended on one of these stopped because of what the model did, not because anything broke.
MODEL_LIMIT_API_ERRORS = frozenset({"max_output_tokens"})
MODEL_LIMIT_SUBTYPES = frozenset(
    {"error_max_turns", "error_max_budget_usd", "error_max_structured_output_retries"}
)
CLAUDE_CODE_BUILTIN_TOOLS = frozenset(
    "Agent Bash BashOutput CronCreate CronDelete CronList Edit EnterWorktree ExitPlanMode ExitWorktree "
    "Glob Grep KillShell LS ListAgents Monitor MultiEdit NotebookEdit Read ReportFindings ScheduleWakeup "
    "SendMessage Skill Task TaskStop TodoWrite ToolSearch WebFetch WebSearch Workflow Write".split()
)

INSTALL = HarnessInstall(
    manager="npm",
    packages=[f"@anthropic-ai/claude-code@{CLAUDE_CODE_VERSION}"],
    prefix="/opt/evsys-harness/claude-code",
)


def _json_line(obj: dict[str, Any]) -> bytes:
    return (json.dumps(obj) + "\n").encode()


class ClaudeCodeAdapter(StdioHarnessAdapter):
    """Drives one long-lived `claude -p` process over stream-json (see the module docstring)."""

    builtin_tools = CLAUDE_CODE_BUILTIN_TOOLS

    def __init__(self, config: HarnessConfig, *, home: str, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        self.home = home.rstrip("/")
        self.session_info: dict[str, Any] = {}  # the latest `system`/`init` line (tools, MCP servers, model)
        self.native_log: list[dict[str, Any]] = []  # the stream-json records of every turn, for ATIF

    # -- configuration ---------------------------------------------------------------------------------------

    def render_mcp_config(self) -> bytes | None:
        """The `--mcp-config` file: the injected tools' server and the task's servers, or no servers at all
        (`--strict-mcp-config` keeps Claude Code from looking anywhere else)."""
        if not self.config.mcp_config_path:
            return None
        return (json.dumps({"mcpServers": self.mcp_server_entries()}, indent=2) + "\n").encode()

    def model_env(self) -> dict[str, str]:
        """The proxy endpoint (no `/v1`), the session key (x-api-key) and the model for every role."""
        if self.endpoint is None:
            return {}
        model = self.config.model or self.endpoint.model
        env = {
            "ANTHROPIC_BASE_URL": self.endpoint.base_url.rstrip("/"),
            self.config.api_key_env_var or "ANTHROPIC_API_KEY": self.endpoint.api_key,
        }
        return env | dict.fromkeys(MODEL_ROLE_VARS, model)

    def environment(self) -> dict[str, str]:
        """HOME, PATH and the no-traffic switches, the model variables, then the config's own variables."""
        bin_dir = self.config.command[0].rpartition("/")[0] or "/usr/bin"
        base = {"HOME": self.home, "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin", **QUIET_ENV}
        if self.mcp_server_entries():  # MCP tools in the request's tool list, not behind ToolSearch
            base["ENABLE_TOOL_SEARCH"] = "false"
        return {**base, **self.model_env(), **self.config.env_vars}

    # -- protocol --------------------------------------------------------------------------------------------

    def encode_message(self, message: str) -> bytes:
        """A stream-json user message."""
        return _json_line(
            {"type": "user", "message": {"role": "user", "content": message}, "parent_tool_use_id": None}
        )

    async def _await_ready(self, process: HarnessProcess) -> None:
        """Send the `initialize` control request, then wait for its response (see `ready`)."""
        request = {
            "type": "control_request",
            "request_id": INIT_REQUEST_ID,
            "request": {"subtype": "initialize"},
        }
        try:
            process.stdin.write(_json_line(request))
            await process.stdin.drain()
        except (ConnectionError, OSError):
            pass  # it exited already: the base class reports how, with its stderr
        await super()._await_ready(process)

    def ready(self, obj: dict[str, Any]) -> bool:
        """The `control_response` to our `initialize` request; an error response fails the start."""
        response = obj.get("response") if obj["type"] == "control_response" else None
        if not isinstance(response, dict) or response.get("request_id") != INIT_REQUEST_ID:
            return False
        if response.get("subtype") != "success":
            raise HarnessStartError(
                f"harness {self.config.name!r} refused to initialise: {response.get('error') or response}"
            )
        return True

    def to_events(self, obj: dict[str, Any]) -> list[HarnessEvent]:
        """The events one stream-json line stands for (unknown line types are skipped)."""
        kind = obj["type"]
        if kind == "system" and obj.get("subtype") == "init":
            self.session_info = obj
        if kind in ("system", "user", "assistant", "result"):
            self.native_log.append(obj)
        if kind == "assistant":
            return self._events(_assistant_events(obj))
        if kind == "user":
            return self._events(_tool_results(obj))
        if kind == "result":
            return self._events(_result_events(self.config.name, obj))
        if kind == "control_request":  # nothing should ask with --permission-prompts none; say so if it does
            subtype = (obj.get("request") or {}).get("subtype")
            message = f"unanswered control request {subtype!r} from the harness"
            return self._events([(HarnessEventType.ERROR, {"kind": "protocol_warning", "message": message})])
        return []

    def _events(self, pairs: list[tuple[HarnessEventType, dict[str, Any]]]) -> list[HarnessEvent]:
        return [HarnessEvent(type=kind, data=data, turn=self.turns) for kind, data in pairs]

    @property
    def tool_names(self) -> list[str]:
        """The tools Claude Code offered in the latest turn (MCP tools as `mcp__<server>__<tool>`)."""
        return [str(t) for t in self.session_info.get("tools") or []]

    async def native_steps(self) -> list[Step]:
        """The turns so far as ATIF steps (from the stream-json output)."""
        return native_log_to_steps(self.native_log)


Pairs = list[tuple[HarnessEventType, dict[str, Any]]]


def _blocks(message: Any) -> list[dict[str, Any]]:
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def _assistant_events(obj: dict[str, Any]) -> Pairs:
    message = obj.get("message") or {}
    message_id = message.get("id")
    if obj.get("is_api_error_message") or message.get("model") == "<synthetic>":
        text = "".join(str(b.get("text", "")) for b in _blocks(message))
        return [(HarnessEventType.ERROR, {"kind": "api_error", "message": text, "error": obj.get("error")})]
    pairs: Pairs = []
    for block in _blocks(message):
        if block.get("type") == "text":
            pairs.append((HarnessEventType.TEXT_OUTPUT, {"id": message_id, "text": block.get("text", "")}))
        elif block.get("type") == "tool_use":
            call = {"id": block.get("id"), "name": block.get("name"), "arguments": block.get("input") or {}}
            pairs.append((HarnessEventType.TOOL_CALL, call))
        elif block.get("type") == "thinking":
            pairs.append(
                (HarnessEventType.LLM_CHUNK, {"id": message_id, "reasoning": block.get("thinking", "")})
            )
    return pairs


def _result_content(content: Any) -> Any:
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return content


def _tool_results(obj: dict[str, Any]) -> Pairs:
    pairs: Pairs = []
    for block in _blocks(obj.get("message")):
        if block.get("type") == "tool_result":
            data = {
                "id": block.get("tool_use_id"),
                "output": _result_content(block.get("content")),
                "is_error": bool(block.get("is_error")),
            }
            pairs.append((HarnessEventType.TOOL_RESULT, data))
    return pairs


def _result_events(harness: str, obj: dict[str, Any]) -> Pairs:
    """TURN_COMPLETE with the turn's status (after an ERROR when the harness failed)."""
    data = {
        key: obj.get(key)
        for key in ("subtype", "is_error", "result", "num_turns", "usage", "total_cost_usd", "session_id")
    }
    data |= {"terminal_reason": obj.get("terminal_reason"), "api_error": obj.get("api_error")}
    if not obj.get("is_error"):
        return [(HarnessEventType.TURN_COMPLETE, {"status": "ok", **data})]
    limit = obj.get("api_error") if obj.get("api_error") in MODEL_LIMIT_API_ERRORS else None
    limit = limit or (obj.get("subtype") if obj.get("subtype") in MODEL_LIMIT_SUBTYPES else None)
    reason = str(obj.get("result") or obj.get("errors") or obj.get("subtype") or "unknown error")
    if limit is not None:  # the model ran into the limit: the turn is over, nothing broke
        return [(HarnessEventType.TURN_COMPLETE, {"status": "ok", "limit": limit, **data})]
    error = f"harness {harness!r}: the turn failed: {reason}"
    return [
        (HarnessEventType.ERROR, {"kind": "harness", "message": error}),
        (HarnessEventType.TURN_COMPLETE, {"status": "error", "kind": "harness", "error": error, **data}),
    ]


# -- ATIF from Claude Code's stream-json output or session file ---------------------------------------


class _StepBuilder:
    """Accumulates ATIF steps from Claude Code records in order."""

    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.by_call: dict[str, Step] = {}
        self.open_agent: tuple[str, Step] | None = None  # (message id, step) of the response being read

    def add(self, source: StepSource, record: dict[str, Any], message: str = "") -> Step:
        stamp = {"timestamp": record["timestamp"]} if isinstance(record.get("timestamp"), str) else {}
        step = Step(step_id=len(self.steps) + 1, source=source, message=message, **stamp)
        self.steps.append(step)
        return step

    def user(self, record: dict[str, Any]) -> None:
        blocks = _blocks(record.get("message"))
        for block in blocks:
            if block.get("type") == "tool_result":
                self.tool_result(block)
        text = "".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
        if text:
            self.open_agent = None
            synthetic = record.get("isSynthetic") or record.get("isMeta")
            self.add("system" if synthetic else "user", record, text)

    def tool_result(self, block: dict[str, Any]) -> None:
        self.open_agent = None
        call_id = str(block.get("tool_use_id"))
        owner = self.by_call.get(call_id)
        if owner is not None:
            owner.observation = owner.observation or Observation()
            content = _result_content(block.get("content"))
            owner.observation.results.append(ObservationResult(source_call_id=call_id, content=content))

    def assistant(self, record: dict[str, Any]) -> None:
        message = record.get("message") or {}
        if record.get("is_api_error_message") or message.get("model") == "<synthetic>":
            self.open_agent = None
            self.add("system", record, "".join(str(b.get("text", "")) for b in _blocks(message)))
            return
        step = self.agent_step(str(message.get("id") or ""), record)
        for block in _blocks(message):
            kind = block.get("type")
            if kind == "text":
                text = str(block.get("text", ""))
                step.message = f"{step.message}\n{text}" if step.message else text
            elif kind == "thinking":
                thought = str(block.get("thinking", ""))
                step.reasoning_content = (
                    f"{step.reasoning_content}\n{thought}" if step.reasoning_content else thought
                )
            elif kind == "tool_use":
                call_id = str(block.get("id") or "")
                given = block.get("input")
                arguments = given if isinstance(given, dict) else {}
                call = ToolCall(
                    tool_call_id=call_id, function_name=str(block.get("name", "")), arguments=arguments
                )
                step.tool_calls = [*(step.tool_calls or []), call]
                self.by_call[call_id] = step
        self.usage(step, message)

    def agent_step(self, message_id: str, record: dict[str, Any]) -> Step:
        if self.open_agent is None or self.open_agent[0] != message_id:
            self.open_agent = (message_id, self.add("agent", record))
        return self.open_agent[1]

    @staticmethod
    def usage(step: Step, message: dict[str, Any]) -> None:
        """Token counts; the completion count only once the response is final (stream-json lines carry the
        message-start usage, whose output count is still 0)."""
        usage = message.get("usage")
        if not isinstance(usage, dict):
            return
        final = message.get("stop_reason") is not None
        step.metrics = StepMetrics(
            prompt_tokens=usage.get("input_tokens"),
            completion_tokens=usage.get("output_tokens") if final else None,
            cached_tokens=usage.get("cache_read_input_tokens"),
        )


def native_log_to_steps(lines: Iterable[str | bytes | dict[str, Any]]) -> list[Step]:
    """ATIF steps from Claude Code's stream-json output or its session file: user messages (harness-injected
    ones such as "Output token limit hit" as `system`), one agent step per model response (text, thinking,
    tool calls, token counts), tool results as the observation of the calling step, and Claude Code's own
    API-error messages as `system` steps.

    Subagent records (`isSidechain`, or a non-null `parent_tool_use_id`) and lines that are not JSON objects
    are skipped (a log cut short by a killed process stays readable)."""
    builder = _StepBuilder()
    for line in lines:
        record = line if isinstance(line, dict) else json_object(line)
        if record is None or record.get("isSidechain") or record.get("parent_tool_use_id"):
            continue
        if record.get("type") == "user":
            builder.user(record)
        elif record.get("type") == "assistant":
            builder.assistant(record)
    return builder.steps


def build(setup: HarnessSetup) -> ClaudeCodeAdapter:
    """A Claude Code adapter for a sandbox (`-a claude-code`); options: `model` (the model name it asks
    for), `extra_args` (more `claude` flags)."""
    home = setup.home.rstrip("/")
    mcp_path = f"{home}/.evsys/claude-mcp.json"
    extra = [str(a) for a in setup.options.get("extra_args", [])]
    model = setup.options.get("model") or setup.endpoint.model
    command = [
        f"{setup.bin_dir}/claude",
        *STREAM_FLAGS,
        "--mcp-config",
        mcp_path,
        "--strict-mcp-config",
        "--model",
        model,
        *extra,
    ]
    config = HarnessConfig(
        name="claude-code",
        command=command,
        working_directory=setup.workdir,
        mcp_config_path=mcp_path,
        startup_timeout_s=float(setup.options.get("startup_timeout_s", 60.0)),
        session_timeout_s=setup.session_timeout_s,
        model=model,
        api_key_env_var="ANTHROPIC_API_KEY",
    )
    return ClaudeCodeAdapter(
        config,
        home=home,
        launcher=setup.launcher,
        endpoint=setup.endpoint,
        mcp=setup.mcp,
        mcp_servers=setup.mcp_servers,
    )


DEFINITION = HarnessDefinition(
    name="claude-code",
    install=INSTALL,
    build=build,
    dialect="anthropic",
    description="Anthropic Claude Code CLI (one stream-json process, Messages API through the evsys proxy)",
)
