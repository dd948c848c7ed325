"""`ExecShellSession`: a stateful shell built on nothing but `Sandbox.exec` (the default `Sandbox.shell()`).

Each `run` is one exec whose wrapper first restores the session's state (exported variables and cwd) from a
file in the session user's `$HOME` (root's is 0700, so an agent cannot tamper with a root session), runs the
command, and on exit writes the new state back. A timeout kills that command only; the state stays as it was
before it.

The state lives in two files used in turn, each ending with its sequence number and an end mark: the save
writes the file not in use, and the restore takes the complete one with the higher number. A save cut short
(a timeout during it) leaves the previous state in force, and neither needs a process: no subshell, no
`mv`, only bash builtins (a fork and an exec cost more than the rest of a command on a small VM).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from evsys.records import ExecResult
from evsys.sandbox.base import HELPER_ENV, SandboxError

if TYPE_CHECKING:
    from evsys.sandbox.base import Sandbox

_WRAPPER = r"""
__evsys_state="$HOME/{state}"
__evsys_slot=1 __evsys_seq=0 __evsys_best=-1
for __evsys_n in 0 1; do
  if [ -r "$__evsys_state.$__evsys_n" ]; then
    mapfile -t __evsys_lines < "$__evsys_state.$__evsys_n"
    __evsys_last=${{#__evsys_lines[@]}}
    if [ "$__evsys_last" -ge 2 ] && [ "${{__evsys_lines[__evsys_last-1]}}" = "#end" ]; then
      __evsys_got=${{__evsys_lines[__evsys_last-2]#__evsys_seq=}}
      if [ "$__evsys_got" -gt "$__evsys_best" ] 2>/dev/null; then
        __evsys_best=$__evsys_got __evsys_slot=$__evsys_n
      fi
    fi
  fi
done
unset __evsys_lines __evsys_last __evsys_got __evsys_n
if [ "$__evsys_best" -ge 0 ]; then . "$__evsys_state.$__evsys_slot" 2>/dev/null; fi
__evsys_cmd=$__EVSYS_SHELL_CMD
unset __EVSYS_SHELL_CMD
__evsys_save() {{
  local next=$((1 - __evsys_slot))
  umask 077
  {{ export -p; printf "cd -- %q\n__evsys_seq=%d\n#end\n" "$PWD" $((__evsys_best + 1)); }} \
    > "$__evsys_state.$next"
}}
trap '__evsys_rc=$?; __evsys_save; exit $__evsys_rc' EXIT
eval "$__evsys_cmd"
"""


class ExecShellSession:
    """A shell session inside any `Sandbox`; cwd and exported variables persist between commands."""

    def __init__(self, sandbox: Sandbox, *, session_id: int, cwd: str, user: str) -> None:
        self.sandbox = sandbox
        self.user = user
        self.cwd = cwd
        self.state_file = f".evsys-shell-{session_id}"  # under the user's $HOME
        self._closed = False

    async def run(self, command: str, *, timeout: float | None = None) -> ExecResult:  # noqa: ASYNC109
        """Run one command in the session; a timeout kills that command, not the session."""
        if self._closed:
            raise SandboxError("this shell session is closed")
        script = _WRAPPER.format(state=self.state_file)
        return await self.sandbox.exec(
            script, cwd=self.cwd, user=self.user, timeout=timeout, env={"__EVSYS_SHELL_CMD": command}
        )

    async def close(self) -> None:
        """End the session and forget its state (idempotent)."""
        if self._closed:
            return
        self._closed = True
        state = f'"$HOME/{self.state_file}"'
        try:
            await self.sandbox.exec(f"rm -f -- {state}.0 {state}.1", user=self.user, cwd="/", env=HELPER_ENV)
        except SandboxError:
            pass
