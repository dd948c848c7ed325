"""The daemon's three ways to run a command agree: builtins-only commands in a persistent bash (no fork),
other commands in a pre-forked subshell of a worker, and a freshly forked `bash -c` (with stdin)."""

from __future__ import annotations

import asyncio

import pytest

# Each is run through plain exec (builtins-only ones take the fork-free path) and with stdin (always a fresh
# `bash -c`); output, errors and exit code must be identical.
AGREEING = [
    "echo hi",
    "echo -n hi",
    "echo -e 'a\\tb'",
    "printf '%s-%d\\n' a 3",
    "printf '%5.2f|%x\\n' 3.14159 255",
    "true",
    "false",
    ":",
    "pwd",
    "true && echo yes || echo no",
    "false || echo no; echo after",
    "test -f /etc/passwd && echo file",
    "[ -d /app ] && echo dir",
    "[ -e /nope ] || echo missing",
    "test 3 -gt 2; echo $?",
    "[ a = b ]",
    "echo 'it'\\''s' \"q\"",
    "printf",
    "test 1 -gt x",
    "printf '%d\\n' abc",
    "nosuchcommand",
    "echo one\nnosuchcommand",
    "cd /nope",
    "echo $HOME $USER",
    "exit 3",
]


@pytest.mark.parametrize("command", AGREEING)
async def test_every_path_gives_the_same_result(sandbox, command):
    forked = await sandbox.exec(command, stdin=b"")
    for _ in range(3):  # the first may run forked; later ones on a worker or the fork-free path
        result = await sandbox.exec(command)
        assert (result.exit_code, result.stdout, result.stderr) == (
            forked.exit_code,
            forked.stdout,
            forked.stderr,
        )


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("echo $HOME", "/home/agent"),
        ("echo ~", "/home/agent"),
        ("test -v HOME && echo set", "set"),
        ("printf '%s\\n' \"$USER\"", "agent"),
        ("[ -p /dev/stdin ] && echo pipe || echo no-pipe", "no-pipe"),
        ("echo hi > /tmp/x && cat /tmp/x", "hi"),
        ("echo hi | tr a-z A-Z", "HI"),
        ("echo *", "*"),  # /app is empty: the pattern stays as written
    ],
)
async def test_commands_that_read_state_see_the_commands_own(sandbox, command, expected):
    for _ in range(3):
        result = await sandbox.exec(command)
        assert result.stdout.strip() == expected, result


@pytest.mark.parametrize("command", ["echo a;; echo b", "echo 'unterminated"])
async def test_syntax_errors_are_reported_on_every_path(sandbox, command):
    for kwargs in ({"stdin": b""}, {}, {}, {}):
        result = await sandbox.exec(command, **kwargs)
        assert result.exit_code == 2
        assert "line 1:" in result.stderr  # `bash: -c: line 1:` forked, `bash: eval: line 1:` otherwise
        assert "syntax error" in result.stderr or "unexpected EOF" in result.stderr


async def test_no_command_leaves_state_for_the_next(sandbox):
    mutations = [
        "export LEAK=1",
        "LEAK=2",
        "cd /tmp",
        "umask 077",
        "set -e; set -u",
        "shopt -s xpg_echo",
        "alias echo=false",
        "echo() { printf 'shadowed\\n'; }",
        "enable -n echo",
        "trap 'echo trapped' EXIT",
        "exec 1>&-",
    ]
    for _ in range(4):  # reach every worker and fork-free shell of the user
        await asyncio.gather(*(sandbox.exec(m) for m in mutations))
    checks = {
        'echo "[$LEAK]"': "[]",
        "pwd": "/app",
        "umask": "0022",
        "echo 'a\\tb'": "a\\tb",
        "echo hi": "hi",
        "type -t echo": "builtin",
        "true; echo ok": "ok",
    }
    for _ in range(4):
        results = await asyncio.gather(*(sandbox.exec(c) for c in checks))
        assert [r.stdout.strip() for r in results] == list(checks.values())
        assert all(r.exit_code == 0 and r.stderr == "" for r in results)


async def test_many_concurrent_builtin_commands_each_get_their_own_output(sandbox):
    commands = [f"echo {i}; printf 'e{i}\\n' >&2" if i % 7 else f"printf '%s\\n' {i}" for i in range(300)]
    commands += ["sleep 0.2; echo slow", "cat /etc/hostname"]
    results = await asyncio.gather(*(sandbox.exec(c) for c in commands))
    for i, result in enumerate(results[:300]):
        assert result.stdout == f"{i}\n"
        assert result.stderr == (f"e{i}\n" if i % 7 else "")
    assert results[300].stdout == "slow\n"
    assert results[301].stdout.strip() == "evsys"


async def test_large_output_of_a_builtin_streams_without_deadlock(sandbox):
    for _ in range(2):
        result = await sandbox.exec("printf '%300000s' x")
        assert result.exit_code == 0
        assert len(result.stdout_bytes) == 300_000
        assert result.stdout_bytes.endswith(b" x")


async def test_builtins_run_as_the_requested_user(sandbox):
    for _ in range(2):
        agent = await sandbox.exec("test -r /root && echo readable || echo denied")
        root = await sandbox.exec("test -r /root && echo readable || echo denied", user="root")
        assert (agent.stdout, root.stdout) == ("denied\n", "readable\n")


async def test_missing_cwd_fails_the_same_on_every_path(sandbox):
    forked = await sandbox.exec("echo hi", cwd="/nope", stdin=b"")
    for command in ("echo hi", "ls"):
        for _ in range(2):
            result = await sandbox.exec(command, cwd="/nope")
            assert (result.exit_code, result.stderr) == (126, forked.stderr)
            assert "/nope" in result.stderr


async def test_kill_processes_then_builtins_still_run(sandbox):
    await asyncio.gather(*(sandbox.exec("echo warm") for _ in range(4)))
    running = asyncio.ensure_future(sandbox.exec("sleep 30"))
    await asyncio.sleep(0.2)
    await sandbox.kill_processes()
    assert (await running).exit_code == 137
    results = await asyncio.gather(*(sandbox.exec(f"echo {i}") for i in range(8)))
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(8)]


async def test_non_utf8_paths_reach_the_sandbox_byte_exact(sandbox):
    made = await sandbox.exec("mkdir /tmp/$'\\xff' && echo made")
    assert made.stdout == "made\n"
    for command in ("pwd", "/bin/pwd"):
        result = await sandbox.exec(command, cwd="/tmp/\udcff")
        assert result.stdout_bytes == b"/tmp/\xff\n"
