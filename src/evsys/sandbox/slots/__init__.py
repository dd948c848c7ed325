"""The slot API for environment authors: `SlotPool.acquire(trajectory_id) -> Slot`, `execute_batch`,
`release` (docs/repo-tasks.md "The slot API", docs/cloud.md "Slots").

A slot is where one trajectory's tool calls run: a `Lease` of the `SandboxPool` under the façade
(evsys.sandbox.pool). With `slots_per_sandbox=1` (the default, and what the local backend should use: its
sandboxes start in ~10 ms and reset in ~2 ms) a slot is a whole sandbox of its own, reset when released. With
`slots_per_sandbox=N` (backends where a sandbox is expensive: the cloud ones) N slots share one sandbox (the
pool's `SharePolicy`, evsys.sandbox.pool.shared: `min_sandboxes` kept started, at most
`max_sandboxes`, idle ones stopped), each isolated by more than a directory: its own uid
(`Sandbox.extra_uid(index)`; no supplementary groups, no capabilities, no_new_privs so no setuid program
raises it), its own workspace (`/slots/<index>`, mode 0700, owned by that uid, also its HOME and cwd) and
temporary directory (`/slots/.tmp/<index>`, its TMPDIR), umask 077, and every command in a new session.
Releasing a slot kills every process of its uid; with `reset_workspace=True` it also empties its workspace
and temporary directory and removes its SysV IPC objects and its files in the shared /tmp, /var/tmp, /dev/shm
and /run/lock — and taking a slot not released that way does it first, so a slot is always handed over clean.
What shared slots do not isolate (the sandbox's network, /proc listings, names in the shared /tmp...) is in
docs/cloud.md.

Two interfaces, for two different callers:
- `exec_tool(slot, tool, args) -> ExecutionResult` (evsys.records) — structured (success, output, error,
  exit code), for an environment's setup and verify hooks;
- `tool_handler(slot)` — an `async (tool_name, args) -> str` returning a JSON string, for an agent loop that
  feeds tool results back to the model.
`execute_batch([(slot, tool, args), ...])` runs calls on different slots concurrently (one asyncio task each;
every sandbox operation is async, nothing blocks the event loop) and returns results in call order; calls on
the same slot run one after the other, in order.
"""

from evsys.sandbox.slots.pool import TOOLS, SlotPool
from evsys.sandbox.slots.sandbox import SlotSandbox
from evsys.sandbox.slots.slot import SHARED_DIRS, SLOTS_DIR, TMP_DIR, Slot, slot_exec

__all__ = [
    "SHARED_DIRS",
    "SLOTS_DIR",
    "TMP_DIR",
    "TOOLS",
    "Slot",
    "SlotPool",
    "SlotSandbox",
    "slot_exec",
]
