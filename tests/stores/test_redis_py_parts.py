"""The parts of redis-py below its public commands that the store relies on, held to the
redis-py versions the locks pin: the connection a thread holds (store/redis/held.py) and the
first contact of a command (store/redis/contact.py) take connections from a client's pool, send
packed commands and read replies on them, and give them back. A redis-py the locks do not pin
fails here first, naming what to check, before anything subtler fails elsewhere."""

from __future__ import annotations

import inspect
import re
from typing import Any, Final

import hiredis
import redis
from redis.cluster import ClusterNode, NodesManager, RedisCluster

from ledger_bus.demo.server import LocalServer
from tests.support.helpers import ROOT

LOCKS: Final = [ROOT / "requirements" / "dev.txt", ROOT / "requirements" / "oldest.txt"]


def pinned_versions() -> set[str]:
    return {
        found[1]
        for lock in LOCKS
        if (found := re.search(r"^redis==(\S+)", lock.read_text(), re.MULTILINE))
    }


def test_the_redis_py_here_is_one_the_locks_pin() -> None:
    pins = pinned_versions()
    assert len(pins) == 2, pins  # the newest the lock takes, and the oldest pyproject allows
    assert redis.__version__ in pins, (
        f"redis-py {redis.__version__} is not pinned by {[p.name for p in LOCKS]}: check"
        " store/redis/held.py and contact.py against it, then pin it"
    )


def test_the_connection_parts_the_store_uses_are_there_with_the_shapes_it_calls() -> None:
    connection, pool = redis.connection.Connection, redis.connection.ConnectionPool
    for part in ("send_packed_command", "send_command", "read_response", "re_auth", "disconnect"):
        assert callable(getattr(connection, part, None)), part
    assert "command" in inspect.signature(connection.send_packed_command).parameters
    for part in ("get_connection", "release"):
        assert callable(getattr(pool, part, None)), part
    # get_connection() with no arguments (its command name went in redis-py 6)
    takes = inspect.signature(pool.get_connection).parameters.values()
    assert all(p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
               for p in list(takes)[1:])  # fmt: skip
    assert callable(getattr(NodesManager, "get_node_from_slot", None))
    assert callable(getattr(RedisCluster, "keyslot", None))
    assert "redis_connection" in inspect.signature(ClusterNode).parameters


def test_the_words_of_a_closed_connection_are_those_the_first_contact_reads() -> None:
    from redis._parsers import socket as parser_socket

    from ledger_bus.store.redis import contact

    assert parser_socket.SERVER_CLOSED_CONNECTION_ERROR == contact._CLOSED
    assert issubclass(redis.exceptions.AuthenticationError, redis.exceptions.ConnectionError)


def test_a_pooled_connection_takes_a_packed_command_and_goes_back(
    redis_server: LocalServer,
) -> None:
    client = redis.Redis.from_url(redis_server.url)
    pool = client.connection_pool
    connection: Any = pool.get_connection()  # as held.py takes it: its parts are untyped
    echo: tuple[Any, ...] = ("ECHO", "held")
    connection.send_packed_command([hiredis.pack_command(echo)])
    assert connection.read_response() == b"held"
    connection.re_auth()  # nothing to do without a new token, and no error
    pool.release(connection)
    assert pool.get_connection() is connection  # the one given back is the one taken next
    client.close()
