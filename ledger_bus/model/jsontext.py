"""JSON text: read from outside (stdin, files, options) so that any fault is one InvalidInput,
and written one object a line; times as the ledger's lines show them."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any, TypeAlias

import orjson

from ledger_bus.model.errors import InvalidInput

# A JSON value, as the ledger's events, records and exports hold them; JSONObject, one object.
# What reads a value of unknown shape takes JSON and narrows it; what builds one returns it.
JSON: TypeAlias = "bool | int | float | str | list[JSON] | dict[str, JSON] | None"
JSONObject: TypeAlias = "dict[str, JSON]"


def format_time(ms: int) -> str:
    """Return a millisecond timestamp as ISO 8601 UTC, e.g. 2026-11-29T23:01:02.345Z."""
    moment = datetime.fromtimestamp(ms / 1000, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def _default(value: Any) -> Any:
    """An artifact's reference (ledger_bus.model.artifacts) as JSON shows it; nothing else."""
    to_dict = getattr(value, "to_dict", None)
    if to_dict is None:
        raise TypeError(f"{type(value).__name__} is not JSON")
    return to_dict()


def dumps(obj: Any) -> str:
    """One JSON object on one line: JSON escapes every line break inside strings."""
    return orjson.dumps(obj, default=_default, option=orjson.OPT_PASSTHROUGH_DATACLASS).decode(
        "utf-8"
    )


def parse_json(text: str | bytes, where: str) -> Any:
    """Parse one JSON text; InvalidInput naming `where` for anything that is not JSON.

    Text nested deeper than the parser's stack can go (tens of thousands of brackets) is refused
    here too; what parses but nests beyond the ledger's limit is refused by the append itself.
    """
    try:
        return json.loads(text)
    except UnicodeDecodeError as err:
        raise InvalidInput(f"{where}: not UTF-8 at byte {err.start}") from None
    except ValueError as err:
        raise InvalidInput(f"{where}: not JSON: {err}") from None
    except RecursionError:
        raise InvalidInput(f"{where}: JSON nested too deeply to read") from None


def text_lines(lines: Iterable[bytes | str], what: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of each non-blank line; InvalidInput for a line that is not UTF-8."""
    for number, raw in enumerate(lines, start=1):
        if isinstance(raw, bytes):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise InvalidInput(f"{what} line {number}: not UTF-8 at byte {err.start}") from None
        else:
            line = raw
        if line.strip():
            yield number, line


def parse_json_values(data: bytes, what: str) -> list[Any]:
    """Every JSON value in `data`, one after another: one a line (JSONL), pretty-printed over
    many lines, or both. InvalidInput names the line of the first fault."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise InvalidInput(f"{what} line {line}: not UTF-8 at byte {err.start}") from None
    decoder = json.JSONDecoder()
    values: list[Any] = []
    position, end = 0, len(text)
    while True:
        while position < end and text[position] in " \t\r\n":
            position += 1
        if position == end:
            return values
        try:
            value, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError as err:
            raise InvalidInput(f"{what} line {err.lineno}: not JSON: {err.msg}") from None
        except ValueError:  # an integer of more digits than Python reads (4300)
            line = text.count("\n", 0, position) + 1
            raise InvalidInput(
                f"{what} line {line}: a number too long to read (the ledger carries integers"
                " within +-(2**53-1))"
            ) from None
        except RecursionError:
            line = text.count("\n", 0, position) + 1
            raise InvalidInput(f"{what} line {line}: JSON nested too deeply to read") from None
        values.append(value)
