"""The reconciler's heartbeat: a file rewritten whole after each pass, which a probe reads
(`ledger-bus reconcile --check`) to tell a live reconciler from a stalled one."""

from __future__ import annotations

import json
import os
import time

from ledger_bus.model.errors import InvalidInput, NotFound
from ledger_bus.model.files import replace_whole
from ledger_bus.model.jsontext import JSONObject, format_time


def write_heartbeat(path: str, report: JSONObject) -> None:
    """Record that a pass finished, atomically (a probe never reads half a file)."""
    with replace_whole(path) as out:
        json.dump({"at": format_time(time.time_ns() // 1_000_000), **report}, out)


def heartbeat_age(path: str) -> float:
    """Seconds since the last pass finished; NotFound when there is no heartbeat."""
    try:
        return time.time() - os.stat(path).st_mtime
    except FileNotFoundError:
        raise NotFound(f"no heartbeat at {path}: the reconciler never finished a pass") from None


def read_heartbeat(path: str) -> JSONObject:
    """The report of the last pass, as the heartbeat file keeps it."""
    try:
        with open(path, encoding="utf-8") as found:
            report = json.load(found)
    except FileNotFoundError:
        raise NotFound(f"no heartbeat at {path}: the reconciler never finished a pass") from None
    except (OSError, ValueError) as err:
        raise InvalidInput(f"heartbeat {path} is unreadable: {err}") from None
    if not isinstance(report, dict):
        raise InvalidInput(f"heartbeat {path} is not a report")
    return report
