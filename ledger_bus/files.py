"""Files a reader must never see half written."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO


@contextmanager
def replace_whole(path: str) -> Iterator[IO[str]]:
    """A text file to write that takes the place of `path` when the block ends, or, when the
    block raises, is removed and leaves `path` as it was.

    It is written beside `path` and renamed over it, which is atomic within one file system.
    """
    directory = os.path.dirname(os.path.abspath(path))
    handle, temp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}-", dir=directory)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            yield out
        os.replace(temp, path)
    except BaseException:
        os.unlink(temp)
        raise
