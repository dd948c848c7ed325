"""`allowlist` networking for the local sandbox: public networking (slirp4netns) narrowed to `allowed_hosts`.

At start the host resolves every allowed host (names and IP literals), installs an nftables filter in the
sandbox's network namespace that drops everything leaving it except loopback, replies, DNS to slirp's
forwarder and the resolved addresses (anything else is rejected at once, so a connect fails fast), and
pins the names to those addresses in the sandbox's `/etc/hosts`, so the sandbox connects to exactly the
addresses the filter allows even when the name's DNS answers rotate. The sandbox has no CAP_NET_ADMIN: it
cannot change the rules. Known limit: DNS queries themselves are allowed (a channel out through the resolver).
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket

from evsys.sandbox.base import HELPER_ENV, Sandbox, SandboxError
from evsys.sandbox.local.rootfs import HOSTS
from evsys.sandbox.local.slirp import DNS_SERVER, host_tool

INSTALL_HINT = "apt-get install nftables"
_HOSTNAME = re.compile(
    r"^(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$"
)


def nft_binary() -> str:
    """The nft executable; SandboxError naming the package when it is missing."""
    return host_tool("nft", "allowlist networking", INSTALL_HINT)


def _check_entry(entry: str) -> str:
    host = entry.strip().lower().rstrip(".")
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    if not _HOSTNAME.match(host):
        raise SandboxError(
            f"allowed_hosts: {entry!r} is not a host name or IP address "
            "(wildcards and ports are not supported)"
        )
    return host


def resolve(hosts: list[str]) -> dict[str, list[str]]:
    """Every allowed host with its addresses (blocking: getaddrinfo); SandboxError naming an entry that is
    malformed or does not resolve."""
    resolved: dict[str, list[str]] = {}
    for entry in hosts:
        host = _check_entry(entry)
        try:
            infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise SandboxError(f"allowed_hosts: cannot resolve {entry!r}: {exc}") from None
        resolved[host] = sorted({str(info[4][0]) for info in infos})
    return resolved


def nft_rules(resolved: dict[str, list[str]]) -> str:
    """The nftables ruleset for the sandbox's namespace."""
    addresses = [ipaddress.ip_address(a) for addrs in resolved.values() for a in addrs]
    v4 = sorted({str(a) for a in addresses if a.version == 4})
    v6 = sorted({str(a) for a in addresses if a.version == 6})
    lines = [
        "table inet evsys {",
        "  chain egress {",
        "    type filter hook output priority 0; policy drop;",
        '    oifname "lo" accept',
        "    ct state established,related accept",
        f"    ip daddr {DNS_SERVER} meta l4proto {{ tcp, udp }} th dport 53 accept",
    ]
    if v4:
        lines.append(f"    ip daddr {{ {', '.join(v4)} }} accept")
    if v6:
        lines.append(f"    ip6 daddr {{ {', '.join(v6)} }} accept")
    lines += ["    reject with icmpx type admin-prohibited", "  }", "}"]
    return "\n".join(lines) + "\n"


NO_NETWORK_RULES = (
    "table inet evsys {\n  chain egress {\n    type filter hook output priority 0; policy drop;\n"
    '    oifname "lo" accept\n    reject with icmpx type admin-prohibited\n  }\n}\n'
)


def phase_rules(mode: str, resolved: dict[str, list[str]]) -> str:
    """The whole ruleset for a phase's `mode`: none for public, loopback only for no-network, the allowlist
    filter otherwise. It replaces the previous phase's rules atomically (one `nft -f`)."""
    rules = {"public": "", "no-network": NO_NETWORK_RULES}.get(mode)
    return "flush ruleset\n" + (nft_rules(resolved) if rules is None else rules)


def hosts_file(base: str, resolved: dict[str, list[str]]) -> str:
    """The sandbox's /etc/hosts: the base entries, then each allowed name pinned to its addresses."""
    pinned = [
        f"{address}\t{host}" for host, addrs in resolved.items() for address in addrs if host != address
    ]
    return base + "".join(line + "\n" for line in pinned)


async def restrict(sandbox: Sandbox, daemon_pid: int, resolved: dict[str, list[str]]) -> None:
    """Narrow a started sandbox's slirp4netns network to `resolved` (see the module doc)."""
    await apply_rules(daemon_pid, nft_rules(resolved))
    await pin_hosts(sandbox, resolved)


async def pin_hosts(sandbox: Sandbox, resolved: dict[str, list[str]]) -> None:
    """Pin each allowed name to its resolved addresses in the sandbox's /etc/hosts."""
    hosts = hosts_file(HOSTS, resolved).encode()
    written = await sandbox.exec("cat > /etc/hosts", user="root", stdin=hosts, env=HELPER_ENV)
    if written.exit_code != 0:
        raise SandboxError(f"cannot pin the allowed hosts in /etc/hosts: {written.stderr.strip()}")


async def apply_rules(daemon_pid: int, rules: str) -> None:
    """Load `rules` into the network namespace of `daemon_pid` (nsenter + nft, run on the host)."""
    argv = ["nsenter", f"--net=/proc/{daemon_pid}/ns/net", nft_binary(), "-f", "-"]
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await process.communicate(rules.encode())
    if process.returncode != 0:
        detail = err.decode("utf-8", "replace").strip()
        raise SandboxError(f"cannot install the allowlist filter: {detail or process.returncode}")
