"""JSON text from outside (stdin, files, options), read so that any fault is one InvalidInput."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from ledger_bus.errors import InvalidInput


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
