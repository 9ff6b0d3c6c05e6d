"""The Go SDK runs the same Lua scripts as this package: go/internal/lua/scripts/ holds copies of
ledger_bus/store/lua/*.lua and of their calling convention, protocol.json (made by `go generate
./internal/lua`, embedded in the Go binary), and every copy must be the original byte for byte,
with no script missing on either side. The Go package's own test checks the same from its
side."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ORIGINALS = ROOT / "ledger_bus" / "store" / "lua"
COPIES = ROOT / "go" / "internal" / "lua" / "scripts"
REGENERATE = "run `go generate ./internal/lua` in go/"


def _names(directory: Path) -> set[str]:
    return {path.name for path in directory.glob("*.lua")} | {"protocol.json"}


def test_every_script_has_a_copy_and_every_copy_an_original() -> None:
    originals, copies = _names(ORIGINALS), _names(COPIES)
    assert originals, f"no scripts in {ORIGINALS}"
    assert originals - copies == set(), f"scripts the Go SDK lacks: {REGENERATE}"
    assert copies - originals == set(), f"Go copies of scripts that are gone: {REGENERATE}"


@pytest.mark.parametrize("name", sorted(_names(ORIGINALS)))
def test_copy_is_the_original_byte_for_byte(name: str) -> None:
    original, copy = ORIGINALS / name, COPIES / name
    assert copy.is_file(), f"{name} has no Go copy: {REGENERATE}"
    assert copy.read_bytes() == original.read_bytes(), (
        f"the Go copy of {name} differs: {REGENERATE}"
    )
