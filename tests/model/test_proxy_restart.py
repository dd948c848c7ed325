"""A stopped ModelProxy started again reports where it listens now, not where it listened before."""

from __future__ import annotations

import httpx

from evsys.model.proxy import ModelProxy


async def test_restart_on_a_unix_socket_reports_the_socket_not_the_old_port(tmp_path):
    proxy = ModelProxy()
    first = await proxy.start("127.0.0.1", 0)
    await proxy.stop()
    sock = tmp_path / "proxy.sock"
    second = await proxy.start(port=None, uds=sock)
    try:
        assert first.startswith("http://127.0.0.1:")
        assert second == proxy.url == f"http+unix://{sock}"
        transport = httpx.AsyncHTTPTransport(uds=str(sock))
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as http:
            reply = await http.post("/v1/chat/completions", json={}, headers={"Authorization": "Bearer sk-x"})
        assert reply.status_code == 401  # the proxy answers on the socket it reported
    finally:
        await proxy.stop()
