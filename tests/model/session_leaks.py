"""Run in a subprocess by test_http_sessions_closed.py (with -X dev, so resource warnings are printed):
exercise one path that opens aiohttp sessions against the model server at argv[2], end it, collect the
garbage and print "finished". Whatever aiohttp left unclosed shows on stderr as "Unclosed client session" /
"Unclosed connector". Modes: `leak` (a session left open on purpose: the detector's positive control),
`client` (one OpenAI-compatible client across several event loops, as a trainer's `asyncio.run` per step uses
it: a call, a failing call, a cancelled call), `proxy` (a recording proxy whose client factory makes an
OpenAI-compatible client per session)."""

from __future__ import annotations

import asyncio
import gc
import sys

import aiohttp

from evsys.model import ModelError, RetryPolicy, create_model_client
from evsys.model.proxy import ModelProxy

HI = [{"role": "user", "content": "hi"}]


async def leak(url: str) -> None:
    session = aiohttp.ClientSession()
    async with session.post(f"{url}/chat/completions", json={"model": "ok", "messages": HI}) as response:
        assert response.status == 200


def client(url: str) -> None:
    model = create_model_client("vllm:ok", base_url=url, retry=RetryPolicy(max_attempts=1))
    failing = create_model_client("vllm:fail", base_url=url, retry=RetryPolicy(max_attempts=1))
    slow = create_model_client("vllm:slow", base_url=url)

    async def fail() -> None:
        try:
            await failing.complete(HI)
        except ModelError:
            return
        raise AssertionError("the failing model answered")

    async def cancel() -> None:
        task = asyncio.create_task(slow.complete(HI))
        await asyncio.sleep(0.5)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    for _ in range(2):  # a new event loop per step
        assert asyncio.run(model.complete(HI)).text == "fine"
    asyncio.run(fail())
    asyncio.run(cancel())
    asyncio.run(model.aclose())  # on a loop that never used the client


async def proxy(url: str) -> None:
    async with ModelProxy(lambda: create_model_client("vllm:ok", base_url=url)) as started:
        session = started.open_session()
        headers = {"Authorization": f"Bearer {session.key}"}
        async with aiohttp.ClientSession() as http:
            body = {"model": "any", "messages": HI}
            async with http.post(f"{started.url}/v1/chat/completions", json=body, headers=headers) as reply:
                assert reply.status == 200, await reply.text()
        assert len(session.calls) == 1
        started.close_session(session.key)


if __name__ == "__main__":
    mode, base_url = sys.argv[1], sys.argv[2]
    if mode == "client":
        client(base_url)
    else:
        asyncio.run({"leak": leak, "proxy": proxy}[mode](base_url))
    gc.collect()
    print("finished")
