"""The recording model proxy: OpenAI- and Anthropic-compatible endpoints in front of any `ModelClient`.

Black-box harnesses (Claude Code, Codex, mini-swe-agent...) are pointed at the proxy with a per-trial
session key; every model call they make is recorded (messages, tools, completion with token ids and
logprobs, usage, cost, latency) and can be turned into ATIF steps. `forwarder.py` is the stdlib-only
TCP-to-unix-socket bridge that runs inside a no-network sandbox."""

from evsys.model.proxy.server import ModelProxy
from evsys.model.proxy.session import ProxyCall, ProxySession, calls_to_steps, new_session_key

__all__ = ["ModelProxy", "ProxyCall", "ProxySession", "calls_to_steps", "new_session_key"]
