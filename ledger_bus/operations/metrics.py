"""The reconciler's Prometheus metrics, and the store's gauges served beside them."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from ledger_bus.model.errors import LedgerError
from ledger_bus.operations.reconciler import PassReport
from ledger_bus.store.base import EventStore, ServerAdmin, Tiered

log = logging.getLogger("ledger_bus.reconciler")


class StoreGauges:
    """Gauges read from the store when Prometheus scrapes: sessions by tier (`redis`, `archive`
    for the sessions archived to SQL, `sql` or `memory` for those stores) and Redis's
    used_memory and maxmemory, so an alert can fire before appends are refused."""

    def __init__(self, store: EventStore):
        self.store = store

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily  # noqa: PLC0415  (see ReconcilerMetrics)

        store = self.store
        try:
            sessions = GaugeMetricFamily(
                "ledger_sessions", "Sessions holding events, by tier", labels=["tier"]
            )
            sessions.add_metric([store.tier], store.session_count())
            if isinstance(store, Tiered):
                sessions.add_metric(["archive"], store.archive.session_count())
            memory = store.memory_info() if isinstance(store, ServerAdmin) else None
        except LedgerError as err:  # a scrape while the store is down shows no gauge, not a 500
            log.warning("store gauges skipped: %s", err)
            return
        yield sessions
        if memory is not None:
            used, limit = memory
            yield GaugeMetricFamily(
                "ledger_redis_used_memory_bytes",
                "Redis used_memory (on a cluster, of the primary nearest its maxmemory)",
                value=used,
            )
            yield GaugeMetricFamily(
                "ledger_redis_maxmemory_bytes", "Redis maxmemory (0: none set)", value=limit
            )


class ReconcilerMetrics:
    """Prometheus metrics of a reconciler, served on a port of their own; with a store, its
    gauges too (StoreGauges)."""

    def __init__(self, port: int, address: str = "127.0.0.1", store: EventStore | None = None):
        # prometheus_client, loaded only by a reconciler that serves metrics: every other
        # command that imports the reconciler's module starts without it.
        from prometheus_client import (  # noqa: PLC0415
            CollectorRegistry,
            Counter,
            Gauge,
            start_http_server,
        )

        self.registry = CollectorRegistry()
        if store is not None:
            self.registry.register(StoreGauges(store))
        self.open = Gauge(
            "ledger_reconciler_open_attempts",
            "Open attempts seen in the last pass",
            registry=self.registry,
        )
        self.flagged = Counter(
            "ledger_reconciler_flagged", "Attempts flagged unresolved", registry=self.registry
        )
        self.errors = Counter(
            "ledger_reconciler_errors", "Sessions a pass could not read", registry=self.registry
        )
        self.seconds = Gauge(
            "ledger_reconciler_pass_seconds", "Duration of the last pass", registry=self.registry
        )
        self.passes = Counter("ledger_reconciler_passes", "Passes finished", registry=self.registry)
        self.rewinds = Counter(
            "ledger_reconciler_rewinds",
            "Flags this reconciler wrote that a failover lost",
            registry=self.registry,
        )
        self.server, self.thread = start_http_server(port, addr=address, registry=self.registry)

    def observe(self, report: PassReport) -> None:
        self.open.set(report.open_attempts)
        self.flagged.inc(report.flagged)
        self.errors.inc(report.errors)
        self.seconds.set(report.seconds)
        self.passes.inc()
        self.rewinds.inc(report.rewinds)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
