"""Files a reader must never see half written."""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from ledger_bus.model.errors import InvalidInput


@contextmanager
def replace_whole(path: str, binary: bool = False) -> Iterator[IO[Any]]:
    """A text file (or with `binary`, a file of bytes) to write that takes the place of `path`
    when the block ends, or, when the block raises, is removed and leaves `path` as it was.

    It is written beside `path` and renamed over it, which is atomic within one file system.
    Its mode is what `>` would leave: the mode of the file it replaces, or for a new file
    0666 less the umask (a temporary file alone would be 0600).
    """
    directory = os.path.dirname(os.path.abspath(path))
    try:
        handle, temp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}-", dir=directory)
    except (OSError, ValueError) as err:  # ValueError: a NUL in the name
        raise InvalidInput(f"cannot write {path!r}: {getattr(err, 'strerror', err)}") from None
    try:
        os.fchmod(handle, _mode_for(path))
        with os.fdopen(handle, "wb") if binary else os.fdopen(handle, "w", encoding="utf-8") as out:
            yield out
        try:
            os.replace(temp, path)
        except OSError as err:
            raise InvalidInput(f"cannot write {path!r}: {err.strerror}") from None
    except BaseException:
        os.unlink(temp)
        raise


def _mode_for(path: str) -> int:
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        mask = os.umask(0o022)  # reading the umask means setting it: put it back at once
        os.umask(mask)
        return 0o666 & ~mask
