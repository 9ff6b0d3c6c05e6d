"""`ledger-bus mcp` against the library, measured in the same run on one private Redis on loopback.

1. A tail of 20 (of a 1,000-event session) and a post (one message, with an append id), one at a
   time from one client: p50 and p99 through the MCP server over stdio (the command a client
   starts) and over streamable HTTP (the command with a tokens file, the client sending a bearer
   token), beside the same reads and appends made by the library (`store.tail`, `store.append`)
   from the same process. Rounds alternate among the three, so that each sees the same machine.
2. Posts per second from 20 MCP clients over HTTP at once (a session each, as 20 agents would
   open theirs), beside 20 threads appending through one library store.

    python scripts/bench_mcp.py            # 400 calls of each kind
    python scripts/bench_mcp.py --quick    # 100
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

import ledger_bus as lb
from ledger_bus.access.identity import Identity
from ledger_bus.access.tokens import add_token
from ledger_bus.demo.server import LocalServer, free_port
from ledger_bus.model.ids import ANY
from tests.support.helpers import cli_env, ledger_serving

PREFIX = "bench-mcp"
SESSION = "bench"
CLIENTS = 20
ROUNDS = 4
TEXT = "the build is green on main; deploying the staging environment next"  # ~70 bytes


def pct(samples: list[float], q: float) -> float:
    """The q-quantile of the samples, in milliseconds."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def cpu_seconds(pid: int) -> float:
    """The CPU time a process has used so far (user and system), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def http_client(stack: AsyncExitStack, url: str, token: str) -> Client:
    http = await stack.enter_async_context(
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    )
    return await stack.enter_async_context(Client(streamable_http_client(url, http_client=http)))


async def checked(client: Client, tool: str, args: dict[str, Any]) -> Any:
    result = await client.call_tool(tool, args)
    if result.is_error:
        raise RuntimeError(f"{tool}: {result.content}")
    return result


async def timed_calls(call: Callable[[int], Awaitable[Any]], start: int, n: int) -> list[float]:
    samples = []
    for i in range(start, start + n):
        began = time.perf_counter()
        await call(i)
        samples.append(time.perf_counter() - began)
    return samples


Samples = dict[str, dict[str, list[float]]]


async def measured(url: str, calls: int) -> tuple[Samples, dict[str, float]]:
    """Per face ("library", "stdio", "http"), per call ("tail", "post"): the seconds of each;
    and the posts per second of many at once, with the CPU each post cost over HTTP."""
    store = lb.connect(url, prefix=PREFIX)
    seed = [{"type": "message", "agent": "seed", "body": f"{TEXT} ({i})"} for i in range(1_000)]
    for at in range(0, len(seed), 100):
        store.append(lb.StreamId(SESSION, "seed"), at, f"seed-{at}", seed[at : at + 100])
    samples: Samples = {face: {"tail": [], "post": []} for face in ("library", "stdio", "http")}

    async def library_tail(_: int) -> None:
        await asyncio.to_thread(store.tail, SESSION, 20)

    async def library_post(i: int) -> None:
        event = {"type": "message", "agent": "lib", "body": TEXT}
        await asyncio.to_thread(
            store.append, lb.StreamId(SESSION, "posts-lib"), ANY, f"lib-{i}", [event]
        )

    stdio = StdioServerParameters(
        command=sys.executable,
        args=["-m", "ledger_bus", "mcp", "--agent", "bench"],
        env=cli_env(url, PREFIX),
    )
    async with AsyncExitStack() as stack:
        over_stdio = await stack.enter_async_context(Client(stdio))
        with tempfile.TemporaryDirectory() as scratch:
            file = str(Path(scratch) / "tokens.json")
            port = free_port()
            command = ["mcp", "--http", "--port", str(port), "--tokens", file]
            log = Path(scratch) / "mcp.log"
            server = stack.enter_context(ledger_serving(url, PREFIX, port, log, *command))
            server_url = f"http://127.0.0.1:{port}/mcp"
            # the file is read again when it changes: a token made after the start counts
            over_http = await http_client(
                stack, server_url, add_token(file, Identity("bench", "writer", "*"))
            )

            def tools_of(client: Client, face: str) -> dict[str, Callable[[int], Awaitable[Any]]]:
                async def tail(_: int) -> None:
                    await checked(client, "tail", {"session": SESSION, "n": 20})

                async def post(i: int) -> None:
                    args = {"session": SESSION, "body": TEXT, "append_id": f"{face}-{i}"}
                    await checked(client, "post", args)

                return {"tail": tail, "post": post}

            faces: dict[str, dict[str, Callable[[int], Awaitable[Any]]]] = {
                "library": {"tail": library_tail, "post": library_post},
                "stdio": tools_of(over_stdio, "stdio"),
                "http": tools_of(over_http, "http"),
            }
            for kinds in faces.values():  # warm: connections, scripts, imports
                for call in kinds.values():
                    await timed_calls(call, 1_000_000, 20)
            per_round = max(1, calls // ROUNDS)
            for r in range(ROUNDS):
                for face, kinds in faces.items():
                    for kind, call in kinds.items():
                        samples[face][kind] += await timed_calls(call, r * per_round, per_round)
            # and many at once
            many = {"library": library_rate(store, calls)}
            many.update(await http_rate(server_url, file, calls, server.pid))
    store.close()
    return samples, many


def library_rate(store: lb.EventStore, calls: int) -> float:
    """Posts per second from CLIENTS threads appending through one store."""
    per = max(1, calls // 4)

    def work(c: int) -> None:
        for i in range(per):
            event = {"type": "message", "agent": f"lib-{c}", "body": TEXT}
            store.append(lb.StreamId(f"{SESSION}-lib-{c}", "posts"), ANY, f"many-{i}", [event])

    threads = [threading.Thread(target=work, args=(c,)) for c in range(CLIENTS)]
    began = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return CLIENTS * per / (time.perf_counter() - began)


async def http_rate(server_url: str, file: str, calls: int, server_pid: int) -> dict[str, float]:
    """Posts per second from CLIENTS MCP clients over HTTP at once, each its own session, and
    the CPU seconds a post cost the server and the clients."""
    per = max(1, calls // 4)
    async with AsyncExitStack() as stack:
        clients = [
            await http_client(stack, server_url, add_token(file, Identity(f"c{c}", "writer", "*")))
            for c in range(CLIENTS)
        ]

        async def work(c: int, client: Client) -> None:
            for i in range(per):
                args = {"session": f"{SESSION}-http-{c}", "body": TEXT, "append_id": f"m-{i}"}
                await checked(client, "post", args)

        began, server_cpu, client_cpu = (
            time.perf_counter(),
            cpu_seconds(server_pid),
            time.process_time(),
        )
        await asyncio.gather(*(work(c, client) for c, client in enumerate(clients)))
        posts = CLIENTS * per
        # Both ends share this machine's cores: what each spent says which one sets the pace.
        return {
            "http": posts / (time.perf_counter() - began),
            "server_cpu": (cpu_seconds(server_pid) - server_cpu) / posts,
            "clients_cpu": (time.process_time() - client_cpu) / posts,
        }


def report(samples: Samples, many: dict[str, float], binary: str) -> dict[str, Any]:
    print(f"server: {binary}; one client, one call at a time; p50 / p99 in ms")
    figures: dict[str, Any] = {}
    for kind, what in (("tail", "tail of 20"), ("post", "post (1 message)")):
        lib50 = statistics.median(samples["library"][kind]) * 1000
        for face in ("library", "stdio", "http"):
            got = samples[face][kind]
            p50, p99 = pct(got, 0.5), pct(got, 0.99)
            figures[f"{face}.{kind}"] = {"p50_ms": round(p50, 3), "p99_ms": round(p99, 3)}
            ratio = "" if face == "library" else f"   p50 {p50 / lib50:5.1f}x the library's"
            print(f"  {what:<17} {face:<8} p50 {p50:7.2f}   p99 {p99:7.2f}{ratio}")
    lib_rate, http_rate_ = many["library"], many["http"]
    figures["posts_per_s"] = {"library": round(lib_rate), "http": round(http_rate_)}
    print(
        f"{CLIENTS} clients posting at once: MCP over HTTP {http_rate_:,.0f} posts/s,"
        f" the library from {CLIENTS} threads {lib_rate:,.0f} appends/s"
        f" ({http_rate_ / lib_rate:.2f}x)"
    )
    print(
        f"  CPU per post over HTTP: the server {many['server_cpu'] * 1000:.2f} ms,"
        f" the {CLIENTS} MCP clients {many['clients_cpu'] * 1000:.2f} ms"
        f" ({os.cpu_count()} cores shared by both)"
    )
    figures["cpu_ms_per_post"] = {
        "server": round(many["server_cpu"] * 1000, 3),
        "clients": round(many["clients_cpu"] * 1000, 3),
    }
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 calls of each kind")
    parser.add_argument("--json", action="store_true", help="the figures as JSON, last")
    options = parser.parse_args()
    calls = 100 if options.quick else 400
    with LocalServer(appendonly=False) as server:
        samples, many = asyncio.run(measured(server.url, calls))
        figures = report(samples, many, server.binary)
    if options.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
