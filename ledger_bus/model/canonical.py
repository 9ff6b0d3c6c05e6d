"""RFC 8785 canonical bytes and content digests.

The digest of an append is what makes a retry idempotent, so every SDK must produce the same bytes
for the same events. `rfc8785` is the reference, and the slowest step of preparing an event by far
(docs/performance.md has the figures). For the common case (ASCII object keys, no floats, integers
within the exact range of a double) orjson's compact output with sorted keys is the same bytes,
far faster: key order by code point equals order by UTF-16 unit for ASCII keys, strings are
raw UTF-8, and both escape exactly `"`, `\\` and the C0 controls, with lowercase hex. Property
tests in tests/contract/test_canonical_json.py hold the two paths equal; everything else goes
through `rfc8785`.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import orjson
import rfc8785

from ledger_bus.model.ids import valid_unicode

MAX_SAFE_INTEGER = 2**53 - 1
# How deeply objects and arrays may nest in an event, the event object itself being level 1
# (spec 2.1). The checks below stop at this depth instead of recursing on, so input nested
# thousands of levels deep is refused by name rather than exhausting the interpreter's stack, and
# orjson (which gives up at 255) is never asked to encode anything deeper.
MAX_DEPTH = 128


def _fast_dumps(value: Any) -> bytes:
    """orjson's sorted compact JSON: RFC 8785 for values `_plain` admits."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


class JsonValueError(ValueError):
    """Raised when a value cannot be carried by JSON exactly; `path` says where, innermost first."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message
        self.path: list[str] = []

    @property
    def where(self) -> str:
        steps = list(reversed(self.path))
        if len(steps) > 12:  # a path as deep as MAX_DEPTH would fill the screen
            steps = [*steps[:6], f"...({len(steps) - 8} more)...", *steps[-2:]]
        return "".join(steps).lstrip(".")


def _check_text(text: str) -> bool:
    """Return True for ASCII text; raise for text that is not valid Unicode."""
    if text.isascii():
        return True
    if not valid_unicode(text):
        raise JsonValueError("string is not valid Unicode (a lone surrogate)")
    return False


def check_json(value: Any, depth: int = 1) -> bool:
    """Check that `value` is plain JSON that RFC 8785 can carry exactly, nested at most
    MAX_DEPTH levels (`depth` is the level `value` stands at).

    Returns True when the fast canonical path gives RFC 8785 bytes for it, False when only the
    reference implementation may be used. Raises JsonValueError naming the offending place.
    """
    kind = type(value)
    if depth > MAX_DEPTH and (isinstance(value, dict | list | tuple)):
        raise JsonValueError(f"nested more than {MAX_DEPTH} levels deep")
    if kind is str:
        _check_text(value)
        return True
    if kind is bool or value is None:
        return True
    if kind is int:
        if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            return True
        raise JsonValueError("integer outside +-(2**53-1), which JSON cannot carry exactly")
    if kind is float:
        if math.isfinite(value):
            return False  # number formatting differs from repr(); the reference handles it
        raise JsonValueError(f"{value} is not a JSON number")
    if isinstance(value, dict):
        return _check_object(value, kind is dict, depth)
    if isinstance(value, list | tuple):
        return _check_array(value, kind is list or kind is tuple, depth)
    # Subclasses (enums and the like) are checked as their base value and left to the reference.
    for base in (str, int, float):
        if isinstance(value, base):
            check_json(base(value) if base is not str else str.__str__(value))
            return False
    raise JsonValueError(f"{kind.__name__} is not a JSON value")


def _check_object(value: dict[Any, Any], fast: bool, depth: int) -> bool:
    for key, item in value.items():
        if type(key) is not str:
            raise JsonValueError(f"object key {key!r} is not a string")
        fast = _check_text(key) and fast
        try:
            fast = check_json(item, depth + 1) and fast
        except JsonValueError as err:
            err.path.append(f".{key}")
            raise
    return fast


def _check_array(value: list[object] | tuple[object, ...], fast: bool, depth: int) -> bool:
    for index, item in enumerate(value):
        try:
            fast = check_json(item, depth + 1) and fast
        except JsonValueError as err:
            err.path.append(f"[{index}]")
            raise
    return fast


def _plain(value: dict[object, object] | list[object], depth: int = 1) -> bool:
    """True when `value` surely takes the fast path: the hot-path test, one loop per container.

    Strings are not looked at: a lone surrogate makes orjson refuse the value, and then
    `check_json` names the fault. Anything unusual, nesting past MAX_DEPTH included, returns
    False, and `check_json` decides.
    """
    if depth > MAX_DEPTH:
        return False
    if type(value) is dict:
        for key in value:
            if type(key) is not str or not key.isascii():
                return False
        items: Any = value.values()
    else:
        items = value
    for item in items:
        kind = type(item)
        if kind is str or kind is bool or item is None:
            continue
        if kind is int:
            if -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER:
                continue
            return False
        if (kind is dict or kind is list) and _plain(item, depth + 1):
            continue
        return False
    return True


def plain_value(value: Any, depth: int) -> bool:
    """`_plain` for any value standing at nesting level `depth`, scalars included."""
    kind = type(value)
    if kind is dict or kind is list:
        return _plain(value, depth)
    return _plain([value], depth - 1)


def fast_bytes(value: object) -> bytes | None:
    """RFC 8785 bytes of `value`, already known to pass `_plain` (or `plain_value`) throughout,
    or None when orjson refuses it (a lone surrogate)."""
    try:
        return _fast_dumps(value)
    except TypeError:
        return None


def canonical_bytes(value: Any) -> bytes:
    """Return the RFC 8785 serialisation of `value`; raise JsonValueError naming any fault."""
    if (type(value) is dict or type(value) is list) and _plain(value):
        try:
            return _fast_dumps(value)
        except TypeError:
            pass  # a lone surrogate; check_json below names the place
    if check_json(value):
        return _fast_dumps(value)
    try:
        return bytes(rfc8785.dumps(value))
    except rfc8785.CanonicalizationError as err:
        raise JsonValueError(str(err)) from err


def digest_of_parts(parts: list[bytes]) -> str:
    """Return the sha256 hex digest of the canonical JSON array whose elements are `parts`.

    RFC 8785 serialises an array as its elements' serialisations joined by commas, so digesting
    the parts this way equals digesting `canonical_bytes(list_of_events)`.
    """
    hasher = hashlib.sha256(b"[")
    for index, part in enumerate(parts):
        if index:
            hasher.update(b",")
        hasher.update(part)
    hasher.update(b"]")
    return hasher.hexdigest()
