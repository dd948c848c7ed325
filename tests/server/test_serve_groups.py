"""Served episodes are grouped only by what their client sent together: episodes reset with one `group_id`
(from any connection) form one group of the export, and a client that names none gets its session's own
group, so exporting a serving job never computes advantages across unrelated clients."""

from __future__ import annotations

from openenv.core.generic_client import GenericEnvClient

from evsys.trajectory.export import load_job_groups, rl_rows

GREETING = "Hello from evsys!\n"


def call(tool: str, **arguments) -> dict:
    """An OpenEnv call_tool action."""
    return {"type": "call_tool", "tool_name": tool, "arguments": arguments}


async def episode(url: str, content: str, **reset) -> tuple[str, str]:
    """One create-file episode writing `content`, submitted: its trial name and the group its reset
    reported."""
    async with GenericEnvClient(base_url=url, message_timeout_s=120) as env:
        started = await env.reset(task="create-file", **reset)
        await env.step(call("write_file", path="/app/greeting.txt", content=content))
        final = await env.step(call("submit"))
    return final.observation["metadata"]["trial_name"], started.observation["metadata"]["group_id"]


async def test_episodes_group_by_the_clients_group_id_else_their_session(server):
    reported = dict(
        [
            await episode(server.url, GREETING, group_id="grpo-step-7"),
            await episode(server.url, "Goodbye\n", group_id="grpo-step-7"),  # another connection
            await episode(server.url, GREETING),
        ]
    )
    right, wrong, alone = reported
    results = {name: server.trial_result(name) for name in reported}
    assert [results[n]["reward"] for n in (right, wrong, alone)] == [1.0, 0.0, 1.0]  # positive control
    assert results[right]["group"] == results[wrong]["group"] == "grpo-step-7"
    assert results[alone]["group"].startswith("session-")
    assert all(reported[name] == results[name]["group"] for name in results)  # the client was told
    rows = {row["trial_name"]: row for row in rl_rows(load_job_groups(server.job_dir))}
    assert rows[right]["group_id"] == rows[wrong]["group_id"] == "served/evsys/create-file/grpo-step-7"
    assert (rows[right]["advantage"], rows[wrong]["advantage"]) == (0.5, -0.5)
    same_group = [r for r in rows.values() if r["group_id"] == rows[alone]["group_id"]]
    assert same_group == [rows[alone]] and rows[alone]["advantage"] == 0.0
