"""Values kept packed (msgpack) by the adapters, read back many at a time."""

from __future__ import annotations

from collections.abc import Sequence


def msgpack_array(parts: Sequence[bytes]) -> bytes:
    """One msgpack array of values each already packed: unpacking it is one call for all of
    them (a thread's message list, a session's items), not one call a value."""
    count = len(parts)
    if count < 16:
        head = bytes([0x90 | count])
    elif count < 0x10000:
        head = b"\xdc" + count.to_bytes(2, "big")
    else:
        head = b"\xdd" + count.to_bytes(4, "big")
    return head + b"".join(parts)
