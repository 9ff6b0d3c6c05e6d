"""The Lua scripts' replies read by name (store/redis/replies.py): every shape of every script
the store calls, from literal replies, and the append's main shapes as a real server gives them
through the store, over RESP2 and RESP3."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import redis

import ledger_bus as lb
from ledger_bus.demo.server import LocalServer
from ledger_bus.model.errors import UnexpectedReply
from ledger_bus.store.redis import APPEND, RedisStore
from ledger_bus.store.redis.encoding import ledger_cursor
from ledger_bus.store.redis.replies import (
    Appended,
    Archived,
    ArchiveFinished,
    Changed,
    Conflict,
    Duplicate,
    Fenced,
    FinishedBefore,
    IdempotencyClash,
    MoreToDelete,
    MovedElsewhere,
    NoArtifact,
    NoPermission,
    NothingToDelete,
    OutOfOrder,
    Restored,
    Rewound,
    SessionDeleted,
    StreamDeleted,
    append_reply,
    archive_abandon_reply,
    archive_finish_reply,
    artifact_put_reply,
    delete_session_reply,
    delete_stream_reply,
    forget_session_reply,
    lease_reply,
    prune_consumers_reply,
    read_stream_reply,
    restore_reply,
)
from tests.support.events import msg

CURSOR = b"1700000000000-3"

# -- every shape, from the replies as redis-py gives them ------------------------------------


@pytest.mark.parametrize(
    ("raw", "parsed"),
    [
        ([b"ok", 3, 4, CURSOR, 1, 2], Appended(3, 4, "1700000000000-3", 1, 2)),
        ([b"dup", 3, 4, CURSOR, 0], Duplicate(3, 4, "1700000000000-3", 0)),
        ([b"idem"], IdempotencyClash()),
        ([b"archived", b"sqlite:///cold.db"], Archived("sqlite:///cold.db")),
        ([b"fenced", 4], Fenced(4)),
        ([b"conflict", 7], Conflict(7)),
        ([b"rewound", 2], Rewound(2)),
        ([b"noartifact", b"lb:{s}:art:ab"], NoArtifact("lb:{s}:art:ab")),
        ([b"noperm", b"XADD", b"lb:{s}:log"], NoPermission("XADD", "lb:{s}:log")),
        # decode_responses=True gives text where the server sent bulk strings
        (["ok", 1, 1, "1-0", 0, 0], Appended(1, 1, "1-0", 0, 0)),
    ],
)
def test_each_reply_of_append_lua_is_read_as_its_kind(raw: object, parsed: object) -> None:
    reply = append_reply(raw)

    assert reply == parsed
    assert reply.kind == (raw[0].decode() if isinstance(raw[0], bytes) else raw[0])  # type: ignore[index]


@pytest.mark.parametrize(
    ("raw", "parsed"),
    [
        ([b"ok", 5, 1], Restored(5, 1)),
        ([b"archived", b"postgresql://cold"], Archived("postgresql://cold")),
        ([b"conflict", 4], Conflict(4)),
        ([b"order"], OutOfOrder()),
        ([b"noartifact", b"lb:{s}:art:cd"], NoArtifact("lb:{s}:art:cd")),
        ([b"noperm", b"HSET", b"lb:{s}:open"], NoPermission("HSET", "lb:{s}:open")),
    ],
)
def test_each_reply_of_restore_lua_is_read_as_its_kind(raw: object, parsed: object) -> None:
    assert restore_reply(raw) == parsed


@pytest.mark.parametrize(
    ("parse", "raw", "parsed"),
    [
        (delete_session_reply, [b"ok", 12, 1], SessionDeleted(12, 1)),
        (delete_session_reply, [b"none", 3], NothingToDelete(3)),
        (delete_session_reply, [b"changed"], Changed()),
        (delete_stream_reply, [b"more", 60], MoreToDelete(60)),
        (delete_stream_reply, [b"done", 18, 2], StreamDeleted(18, 2)),
        (delete_stream_reply, [b"none", 0], NothingToDelete(0)),
        (archive_finish_reply, [b"ok"], ArchiveFinished()),
        (archive_finish_reply, [b"done"], FinishedBefore()),
        (
            archive_finish_reply,
            [b"moved", b"sqlite:///other.db"],
            MovedElsewhere("sqlite:///other.db"),
        ),
        (archive_finish_reply, [b"moved", b""], MovedElsewhere("")),
        (archive_finish_reply, [b"changed"], Changed()),
    ],
)
def test_each_reply_of_the_scripts_over_a_session_is_read_as_its_kind(
    parse: Callable[[object], object], raw: object, parsed: object
) -> None:
    assert parse(raw) == parsed


def test_lease_lua_gives_the_holdings_token_or_0() -> None:
    assert lease_reply(7) == 7
    assert lease_reply(1) == 1
    assert lease_reply(0) == 0


@pytest.mark.parametrize("parse", [archive_abandon_reply, artifact_put_reply, forget_session_reply])
def test_the_scripts_of_one_flag_read_1_as_true_and_0_as_false(
    parse: Callable[[object], bool],
) -> None:
    assert parse(1) is True
    assert parse(0) is False


def test_prune_consumers_lua_gives_the_names_removed() -> None:
    assert prune_consumers_reply([b"worker-1", b"worker-2"]) == ["worker-1", "worker-2"]
    assert prune_consumers_reply([]) == []


def test_read_stream_lua_gives_the_entries_with_their_fields_as_a_dict() -> None:
    raw = [[b"1-0", [b"s", b"main", b"v", b"1", b"p", b"\x80"]], [b"1-1", []]]

    assert read_stream_reply(raw) == [
        (b"1-0", {b"s": b"main", b"v": b"1", b"p": b"\x80"}),
        (b"1-1", {}),
    ]
    assert read_stream_reply([]) == []


# -- shapes no script of this package gives ----------------------------------------------------


@pytest.mark.parametrize(
    ("parse", "raw"),
    [
        (append_reply, [b"okay", 1, 1, CURSOR, 0, 0]),  # a kind of no script
        (append_reply, [b"ok", 1, 1, CURSOR, 0]),  # one element short
        (append_reply, [b"dup", 1, 1, CURSOR, 0, 0]),  # one element over
        (append_reply, [b"conflict", b"7"]),  # a version as text
        (append_reply, [b"archived", 3]),  # a place as a number
        (append_reply, []),
        (append_reply, None),
        (append_reply, b"ok"),
        (append_reply, [b"order"]),  # restore.lua's, not append.lua's
        (restore_reply, [b"dup", 1, 1, CURSOR, 0]),  # append.lua's, not restore.lua's
        (restore_reply, [b"ok", 1]),
        (delete_session_reply, [b"more", 1]),
        (delete_session_reply, [b"ok", 1, True]),  # a RESP3 boolean is no generation
        (delete_stream_reply, [b"changed"]),
        (archive_finish_reply, [b"moved"]),
        (archive_finish_reply, [b"none", 0]),
        (lease_reply, -1),
        (lease_reply, True),
        (lease_reply, [1]),
        (artifact_put_reply, None),
        (forget_session_reply, b"1"),
        (archive_abandon_reply, -1),
        (prune_consumers_reply, [b"worker-1", 3]),
        (prune_consumers_reply, 0),
        (read_stream_reply, [[b"1-0", [b"s"]]]),  # a field without its value
        (read_stream_reply, [[b"1-0"]]),
        (read_stream_reply, 1),
    ],
)
def test_a_reply_of_an_unknown_shape_is_refused_naming_its_script(
    parse: Callable[[object], object], raw: object
) -> None:
    with pytest.raises(UnexpectedReply, match=r"\.lua replied .*a shape this package does not"):
        parse(raw)


def test_an_unexpected_reply_is_a_ledger_error_that_names_the_script() -> None:
    with pytest.raises(lb.LedgerError, match=r"^append\.lua replied \[b'what'\]"):
        append_reply([b"what"])


# -- the append's shapes as a real server gives them ---------------------------------------------


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def store(
    request: pytest.FixtureRequest, redis_server: LocalServer, prefix: str
) -> Iterator[RedisStore]:
    client = redis.Redis.from_url(redis_server.url, protocol=request.param)
    store = RedisStore(client, prefix=prefix)
    yield store
    store.close()


STREAM = lb.StreamId("replies-1", "main")


def send_append(
    store: RedisStore,
    append_id: str,
    text: str,
    expected: int | None = None,
    known: int = 0,
    extra_keys: tuple[str, ...] = (),
    extra_args: tuple[str | int, ...] = (),
) -> object:
    """append.lua's raw reply to an append of one message, its KEYS and ARGV built by the
    store."""
    expected_version = lb.ANY if expected is None else expected
    checked, prepared, _ = store._prepare(STREAM, expected_version, append_id, [msg(text)], None)
    args = [*store.append_args(STREAM, checked, append_id, prepared, known), *extra_args]
    keys = [*store._keys_of(STREAM), *extra_keys]
    return store.run_op(store._evalsha(APPEND, keys, args))


def test_a_first_append_replies_ok_with_its_versions_cursor_and_generation(
    store: RedisStore,
) -> None:
    reply = append_reply(send_append(store, "a1", "one"))

    assert isinstance(reply, Appended)
    assert (reply.first, reply.last, reply.opened, reply.generation) == (1, 1, 0, 0)
    assert [e.cursor for e in store.read_stream(STREAM)] == [ledger_cursor(reply.cursor)]


def test_an_append_sent_again_replies_dup_with_the_original_s_place(store: RedisStore) -> None:
    first = append_reply(send_append(store, "a1", "one"))

    again = append_reply(send_append(store, "a1", "one"))

    assert isinstance(first, Appended)
    assert again == Duplicate(first.first, first.last, first.cursor, first.generation)
    assert store.stream_version(STREAM) == 1, "nothing written the second time"


def test_an_append_id_sent_with_other_events_replies_idem(store: RedisStore) -> None:
    send_append(store, "a1", "one")

    assert append_reply(send_append(store, "a1", "other")) == IdempotencyClash()


def test_an_append_expecting_another_version_replies_conflict_with_the_stream_s(
    store: RedisStore,
) -> None:
    send_append(store, "a1", "one")
    send_append(store, "a2", "two")

    assert append_reply(send_append(store, "a3", "three", expected=1)) == Conflict(2)
    assert store.stream_version(STREAM) == 2


def test_an_append_told_of_a_longer_stream_replies_rewound_with_the_stream_s_version(
    store: RedisStore,
) -> None:
    send_append(store, "a1", "one")

    # This writer was acknowledged version 5 in this generation: a failover lost four events.
    reply = append_reply(send_append(store, "a2", "two", known=5))

    assert reply == Rewound(1)
    assert store.stream_version(STREAM) == 1


def test_an_append_whose_artifact_is_gone_replies_noartifact_with_its_key(
    store: RedisStore,
) -> None:
    sha = "ab" * 32
    gone = store.keys.artifact(STREAM.session_id, sha)
    uses = store.keys.artifact_uses(STREAM.session_id)

    reply = append_reply(
        send_append(store, "a1", "one", extra_keys=(uses, gone), extra_args=(sha, 1))
    )

    assert reply == NoArtifact(gone)
    assert store.stream_version(STREAM) == 0


def test_an_append_to_a_session_being_archived_replies_archived_with_where(
    store: RedisStore,
) -> None:
    send_append(store, "a1", "one")
    store.begin_archive(STREAM.session_id, "sqlite:///cold.db")

    assert append_reply(send_append(store, "a2", "two")) == Archived("sqlite:///cold.db")
