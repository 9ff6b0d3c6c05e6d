"""A file replaced whole, or not at all."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ledger_bus.model.files import replace_whole


def test_a_file_is_replaced_only_when_its_writer_finishes(tmp_path: Path) -> None:
    target = tmp_path / "board.json"
    target.write_text("old\n")

    def die_half_way() -> None:
        with replace_whole(str(target)) as out:
            out.write("half of the new")
            raise RuntimeError("the writer died")

    with pytest.raises(RuntimeError):
        die_half_way()
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["board.json"], "no temporary file is left"

    with replace_whole(str(target)) as out:
        out.write("new\n")
    assert target.read_text() == "new\n"
    assert [p.name for p in tmp_path.iterdir()] == ["board.json"]


def test_a_new_file_takes_the_umask_and_a_replaced_one_keeps_its_mode(tmp_path: Path) -> None:
    def mode(path: Path) -> int:
        return stat.S_IMODE(path.stat().st_mode)

    old = os.umask(0o027)
    try:
        with replace_whole(str(tmp_path / "new.jsonl")) as out:
            out.write("x\n")
        assert mode(tmp_path / "new.jsonl") == 0o640, "as `>` would create it, not 0600"
        shared = tmp_path / "shared.jsonl"
        shared.write_text("old\n")
        shared.chmod(0o664)
        with replace_whole(str(shared)) as out:
            out.write("new\n")
        assert mode(shared) == 0o664
        assert os.umask(0o027) == 0o027, "the umask is left as it was"
    finally:
        os.umask(old)
