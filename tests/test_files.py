"""A file replaced whole, or not at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger_bus.files import replace_whole


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
