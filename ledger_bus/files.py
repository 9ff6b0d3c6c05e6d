"""Files a reader must never see half written."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

from ledger_bus.errors import InvalidInput


@contextmanager
def replace_whole(path: str) -> Iterator[IO[str]]:
    """A text file to write that takes the place of `path` when the block ends, or, when the
    block raises, is removed and leaves `path` as it was.

    It is written beside `path` and renamed over it, which is atomic within one file system.
    """
    directory = os.path.dirname(os.path.abspath(path))
    try:
        handle, temp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}-", dir=directory)
    except (OSError, ValueError) as err:  # ValueError: a NUL in the name
        raise InvalidInput(f"cannot write {path!r}: {getattr(err, 'strerror', err)}") from None
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            yield out
        try:
            os.replace(temp, path)
        except OSError as err:
            raise InvalidInput(f"cannot write {path!r}: {err.strerror}") from None
    except BaseException:
        os.unlink(temp)
        raise
