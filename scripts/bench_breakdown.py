"""Where a single-event append's time goes, against one raw XADD round trip, in one run; and
where a 100-event append's goes, against 100 pipelined XADDs.

Prints: the client-side time of the append script called with prepared arguments, of a script
that returns at once with the same arguments, and of one XADD; how long preparing one event
takes in a tight loop, right after a round trip, and after a sleep or a busy wait of 200 us;
and the script's server time with each of its parts left out in turn, of its commands alone, and
of those commands one more at a time (INFO commandstats).
Then, for 100 tool calls with fresh attempt ids: the whole append, the script call alone with
its arguments prepared, the preparation alone, and the preparation's floor, the libraries' own
calls that it makes (one validation of the list, one orjson, one sha256, a sha1 per event id,
ormsgpack per event) with none of the Python around them; against 100 pipelined XADDs. Last,
the preparation stage by stage, in a loop and right after a round trip. docs/performance.md
explains the figures. `--single` runs the single append's part alone.

    python scripts/bench_breakdown.py [--single]
"""

from __future__ import annotations

import gc
import hashlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import orjson
import ormsgpack
import redis
from bench import PAYLOAD, pipelined_xadds, tool_call

from ledger_bus.demo.server import LocalServer
from ledger_bus.model.attempts import attempt_note
from ledger_bus.model.batch import (
    Limits,
    PreparedAppend,
    _all_given_fields,
    _digest,
    prepare_append,
)
from ledger_bus.model.events import validate_all_given
from ledger_bus.model.ids import ANY, StreamId, event_id_deriver
from ledger_bus.store.redis import RedisStore, load_script
from ledger_bus.store.redis.acl import acl_file
from ledger_bus.store.redis.scripts import LuaScript

CALLS = 500
ROUNDS = 12
APPEND = load_script("append").text
INDEX_XADD = "redis.call('XADD', KEYS[3], first_text .. '-0', 'c', first_cursor, 'n', ARGV[5])"


def cut(text: str, *edits: tuple[str, str]) -> str:
    """`text` with each (old, new) replaced; an old that is not there is a stale benchmark."""
    for old, new in edits:
        assert old in text, f"append.lua no longer has {old!r}"
        text = text.replace(old, new)
    return text


ACL_CHECKS = APPEND[APPEND.index("local acl = redis.acl_") : APPEND.index("local first = ")]
PRIOR = "local prior = redis.call('HGET', KEYS[4], ARGV[3])"
RETURN_AT_ONCE = "do return {'ok', 1, 1, '1-1', 0, 0} end\n"

# The commands a single tool_call's append makes, and nothing else: no fence, no decisions, no
# ACL checks, no notes parsed. What the layout costs before the script's own logic; each entry
# is one command (the version is written before the index entry, whose id it gives).
COMMANDS = [
    ("the append_id record's read", "local prior = redis.call('HGET', KEYS[4], ARGV[3])"),
    ("the tombstone's read", "local tomb = redis.call('HMGET', KEYS[7], 'generation', 'archive')"),
    (
        "the version's read",
        "local version = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0') + 1\n"
        "local text = string.format('%d', version)",
    ),
    (
        "the bound's read",
        "local bound = redis.call('HGET', string.sub(KEYS[7], 1, -5) .. 'bounds', ARGV[1])",
    ),
    (
        "the session-log XADD",
        "local cursor = redis.call('XADD', KEYS[1], '*', 's', ARGV[1], 'v', text, 'p', ARGV[10])",
    ),
    (
        "the attempt's HSET",
        "redis.call('HSET', KEYS[5], ARGV[3], 'run\\31tool\\31' .. ARGV[1] .. '\\31' .. cursor)",
    ),
    ("the version's HSET", "redis.call('HSET', KEYS[2], ARGV[1], text)"),
    (
        "the stream index XADD",
        "redis.call('XADD', KEYS[3], text .. '-0', 'c', cursor, 'n', ARGV[5])",
    ),
    (
        "the append_id record's HSET",
        "redis.call('HSET', KEYS[4], ARGV[3], ARGV[4] .. text .. ' 1 ' .. cursor .. ' 0')",
    ),
]
ESSENTIAL = (
    "\n".join(line for _, line in COMMANDS) + "\nreturn {'ok', version, version, cursor, 1, 0}"
)
# The same commands one more at a time, after a call that returns at once: what each adds.
ONE_MORE_AT_A_TIME = {
    "none": "return {'ok'}",
    **{
        f"+ {label}": "\n".join(line for _, line in COMMANDS[: k + 1]) + "\nreturn {'ok'}"
        for k, (label, _) in enumerate(COMMANDS)
    },
}
# One HGET of a key the call has just read, a hundred times in one call: a command's cost in a
# script when its key is hot in the cache (the append's keys are cold between appends).
HOT_HGETS = "for i = 1, 100 do redis.call('HGET', KEYS[2], ARGV[1]) end return {'ok'}"

# The append script with one of its parts cut out: what each part costs on the server.
VARIANTS = {
    "the whole script": APPEND,
    "without the ACL checks": cut(APPEND, (ACL_CHECKS, "")),
    "without the bounds read": cut(
        APPEND,
        ("local bound = redis.call('HGET', prefix .. 'bounds', ARGV[1])", "local bound = nil"),
    ),
    "returning after its reads": cut(
        APPEND, ("-- An artifact written before the call", RETURN_AT_ONCE + "--")
    ),
    "returning before its reads": cut(
        APPEND,
        (PRIOR, RETURN_AT_ONCE + PRIOR),
    ),
    "without the idempotency record": cut(
        APPEND,
        ("local prior = redis.call('HGET', KEYS[4], ARGV[3])", "local prior = false"),
        ("redis.call('HSET', KEYS[4], ARGV[3],", "local _ = ("),
    ),
    "without the stream index": cut(APPEND, (INDEX_XADD, "")),
    "without the stream index and version": cut(
        APPEND,
        (INDEX_XADD, ""),
        ("redis.call('HSET', KEYS[2], ARGV[1], text)", ""),
        ("redis.call('HGET', KEYS[2], ARGV[1])", "false"),
    ),
    "its reads and writes alone, nothing checked": ESSENTIAL,
    "the session-log XADD alone": "local c = redis.call('XADD', KEYS[1], '*', 's', ARGV[1],"
    " 'v', '1', 'p', ARGV[9]) return {'ok', 1, 1, c, 0}",
    "an EVALSHA that returns at once": "return {'ok', 1, 1, '1-1', 0}",
}


def per_call_us(
    fns: Mapping[str, Callable[[], object]], rounds: int = ROUNDS, calls: int = CALLS
) -> dict[str, float]:
    """Median microseconds per call of each function, over alternating rounds."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            gc.collect()
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            samples[name].append((time.perf_counter() - start) / calls * 1e6)
    return {name: statistics.median(found) for name, found in samples.items()}


def caller(
    client: redis.Redis, source: str, prefix: str, prepared: list[PreparedAppend]
) -> Callable[[], object]:
    """Each call appends the next prepared event under keys of its own, the way the store runs
    its append script."""
    store = RedisStore(client, prefix=prefix)
    script = LuaScript(source, hashlib.sha1(source.encode()).hexdigest())
    keys = store._keys_of(StreamId("s", "one"))
    count = iter(range(len(prepared)))

    def call() -> Any:
        i = next(count)
        p: PreparedAppend = prepared[i]
        args = store.append_args(StreamId("s", "one"), None, f"a{i}", p)
        return store.run_op(store._evalsha(script, keys, args))

    return call


def batch_parts() -> None:
    """The 100-event append's parts, in alternating rounds, each against the same raw side."""
    rounds, calls = 12, 25
    with LocalServer(appendonly=False) as server:
        client = redis.Redis(port=server.port, protocol=2)
        store = RedisStore(redis.Redis(port=server.port, protocol=2), prefix="batch")
        limits = Limits()
        made = [
            [tool_call(k * 100 + i) for i in range(100)]
            for k in range(rounds * calls * 4 + calls * 4)
        ]
        prepared = [prepare_append("c", "one", f"c{k}", made[k], limits) for k in range(len(made))]
        count = iter(range(len(made)))
        ref, script = StreamId("b", "one"), load_script("append")
        keys = store._keys_of(StreamId("c", "one"))

        def append() -> None:
            k = next(count)
            store.append(ref, ANY, f"b{k}", made[k])

        def script_alone() -> None:
            # As an append sends it: on this thread's held connection, packed by hiredis.
            k = next(count)
            args = store.append_args(StreamId("c", "one"), None, f"c{k}", prepared[k])
            assert store._held is not None
            store._held.execute(keys[0], "EVALSHA", script.sha, len(keys), *keys, *args)

        def preparation() -> None:
            k = next(count)
            prepare_append("p", "one", f"p{k}", made[k], limits)

        def floor() -> None:
            k = next(count)
            fields = validate_all_given(made[k])
            hashlib.sha256(orjson.dumps(fields, option=orjson.OPT_SORT_KEYS)).digest()
            common = hashlib.sha1(b"p\x1fone\x1fx\x1f", usedforsecurity=False)
            for i, data in enumerate(fields):
                state = common.copy()
                state.update(b"%d" % i)
                data["event_id"] = state.hexdigest()
            [ormsgpack.packb(data) for data in fields]

        parts = {
            "100 pipelined XADDs (raw)": lambda: pipelined_xadds(client),
            "store.append of 100 tool calls": append,
            "its script call alone, as an append sends it": script_alone,
            "its preparation (prepare_append)": preparation,
            "the preparation's floor: library calls only": floor,
        }
        timings = per_call_us(parts, rounds, calls)
        client.config_resetstat()
        for _ in range(calls):
            script_alone()
        server_us = float(client.info("commandstats")["cmdstat_evalsha"]["usec_per_call"])
        print("a 100-event append, medians of alternating rounds:")
        for name, us in timings.items():
            print(f"  {name:<52} {us:7.0f} us")
        print(f"  {'server time of the script call':<52} {server_us:7.0f} us")
        budget = timings["100 pipelined XADDs (raw)"] / 0.8
        print(f"  {'the whole append, for 0.8x of the raw side':<52} {budget:7.0f} us at most")
        store.close()
        client.close()


def preparation_stages() -> None:
    """The 100-event preparation stage by stage, in a loop and right after a round trip (100
    pipelined XADDs, as the raw side sends them): how much the same calls cost an append, whose
    preparation always runs right after the reply to the one before."""
    stages = ("validation", "size checks and digest", "event ids", "attempt notes", "msgpack")
    limits = Limits()
    with LocalServer(appendonly=False) as server:
        client = redis.Redis(port=server.port, protocol=2)

        print("a 100-event append's preparation, stage by stage, medians of alternating blocks:")
        print(f"  {'':<26} {'in a loop':>10} {'after a round trip':>19}")
        found: dict[str, dict[str, list[float]]] = {
            label: {name: [] for name in (*stages, "all")} for label in ("loop", "after")
        }
        k = 0
        for block in range(40):  # alternating blocks of 50, the first 10 of each not counted
            label = "after" if block % 2 else "loop"
            for i in range(50):
                if label == "after":
                    pipelined_xadds(client)
                k += 1
                events = [tool_call(k * 100 + j) for j in range(100)]
                # prepare_append's steps for events without artifacts, in its order
                marks = [time.perf_counter_ns()]
                fields = _all_given_fields(events, limits)
                marks.append(time.perf_counter_ns())
                _digest(fields, limits)
                marks.append(time.perf_counter_ns())
                derive = event_id_deriver("p", "one", f"p{k}")
                for index, data in enumerate(fields):
                    data["event_id"] = derive(index)
                marks.append(time.perf_counter_ns())
                [attempt_note(data) for data in fields]
                marks.append(time.perf_counter_ns())
                [ormsgpack.packb(data) for data in fields]
                marks.append(time.perf_counter_ns())
                if i >= 10:
                    taken = found[label]
                    for name, start, end in zip(stages, marks, marks[1:], strict=False):
                        taken[name].append((end - start) / 1000)
                    taken["all"].append((marks[-1] - marks[0]) / 1000)
        for name in (*stages, "all"):
            loop = statistics.median(found["loop"][name])
            after = statistics.median(found["after"][name])
            print(f"  {name:<26} {loop:7.0f} us {after:15.0f} us")
        client.close()


def main() -> None:
    with LocalServer(appendonly=False) as server:
        client = redis.Redis(port=server.port)
        print(f"server: {server.binary}; {CALLS} calls a round, {ROUNDS} rounds, medians")
        limits = Limits()
        prepared = [
            prepare_append("s", "one", f"a{i}", [tool_call(i)], limits)
            for i in range(CALLS * ROUNDS)
        ]

        timings = per_call_us(
            {
                "append script, arguments prepared beforehand": caller(
                    client, APPEND, "a", prepared
                ),
                "EVALSHA returning at once, same arguments": caller(
                    client, VARIANTS["an EVALSHA that returns at once"], "b", prepared
                ),
                "one XADD round trip": lambda: client.xadd("x", {"p": PAYLOAD}),
            }
        )
        for name, us in timings.items():
            print(f"{name:<48} {us:7.1f} us")

        def round_trip() -> None:
            client.xadd("x", {"p": PAYLOAD})

        def spin() -> None:
            until = time.perf_counter_ns() + 200_000
            while time.perf_counter_ns() < until:
                pass

        # Whether the round trip's cost to the code after it is the wait itself: the core idles
        # while the client sleeps in recv, as it does in time.sleep; in a spin it never idles.
        between_calls: list[tuple[str, Callable[[], None] | None]] = [
            ("prepare one event, tight loop", None),
            ("prepare one event, after each XADD", round_trip),
            ("prepare one event, after a 200 us sleep", lambda: time.sleep(0.0002)),
            ("prepare one event, after a 200 us spin", spin),
        ]
        for label, between in between_calls:
            found = []
            for i in range(3000):
                if between is not None:
                    between()
                event = tool_call(i)
                start = time.perf_counter_ns()
                prepare_append("s", "one", f"p{i}", [event], limits)
                found.append((time.perf_counter_ns() - start) / 1000)
            print(f"{label:<48} {statistics.median(found):7.1f} us")

        server_us = server_times(client, client, VARIANTS, "v", prepared)
        xadd = xadd_server_time(client)
        with tempfile.TemporaryDirectory() as tmp:
            server_us.update(under_the_writer_role(prepared, Path(tmp)))
        print("server time per call (INFO commandstats), median of 5, and x a plain XADD's:")
        for name, found in server_us.items():
            us = statistics.median(found)
            print(f"  {name:<46} {us:6.2f} us {us / xadd:5.1f}x")
        print(f"  {'a plain XADD':<46} {xadd:6.2f} us")
        added = server_times(client, client, ONE_MORE_AT_A_TIME, "m", prepared)
        print("the append's commands one more at a time, median of 5, and what each adds:")
        before = 0.0
        for name, found in added.items():
            us = statistics.median(found)
            print(f"  {name:<46} {us:6.2f} us {us - before:+6.2f} us")
            before = us
        hot = statistics.median(
            server_times(client, client, {"hot": HOT_HGETS}, "h", prepared)["hot"]
        )
        client.config_resetstat()
        for _ in range(2000):
            client.hget("x-hot", "f")
        alone = float(client.info("commandstats")["cmdstat_hget"]["usec_per_call"])
        print(f"  {'an HGET of a hot key in a script, 100 a call':<46} {hot / 100:6.2f} us")
        print(f"  {'an HGET alone':<46} {alone:6.2f} us")
        client.close()


def server_times(
    admin: redis.Redis,
    client: redis.Redis,
    variants: Mapping[str, str],
    prefix: str,
    prepared: list[PreparedAppend],
) -> dict[str, list[float]]:
    """Each variant's server time per call (INFO commandstats, read by `admin`), called 2,000
    times by `client` in each of five rounds, each round and variant under keys of its own."""
    found: dict[str, list[float]] = {name: [] for name in variants}
    for round_ in range(5):
        for number, (name, source) in enumerate(variants.items()):
            call = caller(client, source, f"{prefix}{round_}-{number}", prepared)
            admin.config_resetstat()
            for _ in range(2000):
                call()
            stats = admin.info("commandstats")["cmdstat_evalsha"]
            found[name].append(float(stats["usec_per_call"]))
    return found


def xadd_server_time(admin: redis.Redis) -> float:
    """A plain XADD's server time per call, of 2,000."""
    admin.config_resetstat()
    for _ in range(2000):
        admin.xadd("x", {"p": PAYLOAD})
    return float(admin.info("commandstats")["cmdstat_xadd"]["usec_per_call"])


def under_the_writer_role(prepared: list[PreparedAppend], tmp: Path) -> dict[str, list[float]]:
    """The whole script's server time, and without its ACL checks, for a user under the writer
    role of `ledger-bus acl` (whose checks look at its key patterns), not the default user: on
    a server of its own, started with those users, which `tmp` holds the file of."""
    users = tmp / "users.acl"
    users.write_text(acl_file("bw*", {"writer": "bench"}) + "user default on nopass ~* &* +@all\n")
    with LocalServer(appendonly=False, extra=["--aclfile", str(users)]) as server:
        admin = redis.Redis(port=server.port)
        writer = redis.Redis(port=server.port, username="ledger-writer", password="bench")
        under_role = {f"{name}, writer role": VARIANTS[name] for name in list(VARIANTS)[:2]}
        found = server_times(admin, writer, under_role, "bw", prepared)
        found["a plain XADD, on the writer role's server"] = [xadd_server_time(admin)]
        writer.close()
        admin.close()
    return found


if __name__ == "__main__":
    main()
    if "--single" not in sys.argv[1:]:
        batch_parts()
        preparation_stages()
