"""`ledger-bus db`: the SQL store's schema, under version control."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ledger_bus.cli.app import BadInput, Settings, cli, pass_settings
from ledger_bus.cli.output import show_record
from ledger_bus.store import DEFAULT_URL, split_durability

if TYPE_CHECKING:  # SQLAlchemy is imported only by the commands that need it
    from ledger_bus.store.sql import SqlStore


@cli.group()
def db() -> None:
    """The SQL store's tables (sqlite:///PATH, postgresql://...): their schema revision."""


def _open(settings: Settings) -> SqlStore:
    url, _ = split_durability(settings.url or DEFAULT_URL, None)  # --url or LEDGER_BUS_URL
    if not url.startswith(("sqlite:", "postgresql:", "postgres:")):
        raise BadInput(f"db works on a SQL store (sqlite:///PATH, postgresql://...), not {url!r}")
    from ledger_bus.store.sql import SqlStore  # noqa: PLC0415  (the [sql] extra, for db alone)

    return SqlStore.from_url(
        url, prefix=settings.prefix, timeout=settings.timeout, check_schema=False
    )


@db.command()
@pass_settings
def upgrade(settings: Settings) -> None:
    """Bring the tables to the newest schema revision (creating them in a new database)."""
    store = _open(settings)
    try:
        before, _ = store.schema_revision()
        after = store.upgrade()
    finally:
        store.close()
    show_record(settings, {"prefix": settings.prefix, "from": before, "to": after})


@db.command()
@pass_settings
def current(settings: Settings) -> None:
    """The schema revision the tables are at, and the newest this ledger-bus knows."""
    store = _open(settings)
    try:
        revision, head = store.schema_revision()
    finally:
        store.close()
    show_record(
        settings,
        {
            "prefix": settings.prefix,
            "revision": revision,
            "head": head,
            "up_to_date": revision == head,
        },
    )
