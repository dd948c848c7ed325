"""Run in a subprocess by test_daytona_cancel.py (with -X dev, so resource warnings are printed): a service on
127.0.0.1 that holds every request open, a Daytona sandbox whose start is cancelled once the SDK's create
request has arrived, then garbage collection. Prints the requests the service saw and "finished"; an HTTP
session the SDK was left with shows on stderr as "Unclosed client session"."""

from __future__ import annotations

import asyncio
import gc
import os

from aiohttp import web

from evsys.records import SandboxSpec
from evsys.sandbox.daytona.sandbox import DaytonaSandbox

seen: list[str] = []
creating = asyncio.Event()


async def hold(request: web.Request) -> web.Response:
    seen.append(f"{request.method} {request.path}")
    if request.method == "POST" and request.path == "/api/sandbox":
        creating.set()
    await asyncio.sleep(3600)
    return web.json_response({})


async def main() -> None:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", hold)
    runner = web.AppRunner(app, shutdown_timeout=0.1)  # the held requests are not waited for
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    os.environ.update(
        DAYTONA_API_KEY="probe", DAYTONA_API_URL=f"http://127.0.0.1:{port}/api", DAYTONA_TARGET="us"
    )
    start = asyncio.create_task(DaytonaSandbox(SandboxSpec(name="cancel-probe")).start())
    waiter = asyncio.ensure_future(creating.wait())
    await asyncio.wait([start, waiter], return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    start.cancel()
    await asyncio.gather(start, return_exceptions=True)
    await runner.cleanup()


asyncio.run(main())
gc.collect()
print("requests:", seen)
print("finished")
