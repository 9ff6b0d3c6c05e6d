"""The fast canonical path gives the RFC 8785 reference's bytes, byte for byte."""

from __future__ import annotations

import hashlib
import json
import math
import uuid
from typing import Any

import msgpack
import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger_bus.model.batch import Limits, prepare_append
from ledger_bus.model.canonical import (
    MAX_SAFE_INTEGER,
    JsonValueError,
    _fast_dumps,
    _plain,
    canonical_bytes,
    check_json,
    digest_of_parts,
)
from ledger_bus.model.errors import InvalidEvent
from ledger_bus.model.ids import EVENT_ID_NAMESPACE, derive_event_id
from tests.support.helpers import ROOT

# Text over the whole of Unicode except lone surrogates, with the C0 controls, quotes and
# backslashes that the two escapers must agree on made likely.
text = st.text(
    alphabet=st.one_of(
        st.characters(exclude_categories=["Cs"]),
        st.sampled_from(
            ['"', "\\", "\x00", "\x1f", "\x7f", "\b", "\f", "\n", "\r", "\t", "\u2028"]
        ),
    )
)
ascii_keys = st.text(alphabet=st.characters(max_codepoint=127), max_size=12)
safe_ints = st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER)
finite_floats = st.floats(allow_nan=False, allow_infinity=False)

fast_json = st.recursive(
    st.none() | st.booleans() | safe_ints | text,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(ascii_keys, inner, max_size=5),
    max_leaves=30,
)
any_json = st.recursive(
    st.none() | st.booleans() | safe_ints | finite_floats | text,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(text, inner, max_size=5),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(st.lists(fast_json, max_size=4) | st.dictionaries(ascii_keys, fast_json, max_size=6))
def test_the_fast_path_is_taken_and_equals_the_reference(value: Any) -> None:
    assert check_json(value) is True
    assert _plain(value) is True
    assert _fast_dumps(value) == rfc8785.dumps(value)
    assert canonical_bytes(value) == rfc8785.dumps(value)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(text, any_json, max_size=6))
def test_the_hot_path_test_never_admits_what_only_the_reference_may_encode(value: Any) -> None:
    if _plain(value):
        assert check_json(value) is True


@given(st.text(), st.text(), st.text(), st.integers(min_value=0, max_value=10**6))
def test_generated_event_ids_are_uuid5(
    session: str, stream: str, append_id: str, index: int
) -> None:
    name = f"{session}\x1f{stream}\x1f{append_id}\x1f{index}"
    try:
        name.encode()
    except UnicodeEncodeError:
        return
    expected = str(uuid.uuid5(EVENT_ID_NAMESPACE, name))
    assert derive_event_id(session, stream, append_id, index) == expected


@settings(max_examples=400, deadline=None)
@given(any_json)
def test_every_route_equals_the_reference(value: Any) -> None:
    assert canonical_bytes(value) == rfc8785.dumps(value)


@given(finite_floats)
def test_floats_always_take_the_reference_path(number: float) -> None:
    assert check_json({"x": number}) is False


@given(st.dictionaries(text, safe_ints, min_size=1))
def test_non_ascii_keys_take_the_reference_path_when_present(value: dict[str, int]) -> None:
    assert check_json(value) is all(key.isascii() for key in value)


@settings(max_examples=300, deadline=None)
@given(st.lists(fast_json, max_size=6))
def test_digest_of_parts_equals_the_digest_of_the_whole_array(events: list[Any]) -> None:
    parts = [canonical_bytes(e) for e in events]
    assert digest_of_parts(parts) == hashlib.sha256(rfc8785.dumps(events)).hexdigest()


@pytest.mark.parametrize(
    ("value", "where"),
    [
        ({"a": [1, math.nan]}, "a[1]"),
        ({"a": {"b": math.inf}}, "a.b"),
        ({"a": "\ud800"}, "a"),
        ({"\udc00": 1}, ""),
        ({"a": 2**53}, "a"),
        ({"a": -(2**53)}, "a"),
        ({"a": {1: 2}}, "a"),
        ({"a": b"bytes"}, "a"),
        ({"a": {1.5}}, "a"),
    ],
)
def test_values_json_cannot_carry_exactly_are_refused_with_their_place(
    value: Any, where: str
) -> None:
    with pytest.raises(JsonValueError) as raised:
        check_json(value)
    assert raised.value.where == where


# -- an append's digest: the array is canonicalised in one piece unless an event is at fault ----


def _mutation(data: Any) -> dict[str, Any]:
    return {"type": "mutation", "agent": "a", "kind": "k", "data": data}


@settings(max_examples=300, deadline=None)
@given(st.lists(any_json, min_size=1, max_size=5))
def test_an_appends_digest_is_the_reference_digest_of_its_events(values: list[Any]) -> None:
    events = [_mutation(value) for value in values]
    prepared = prepare_append("s", "x", "a", events, Limits())
    assert prepared.digest == hashlib.sha256(rfc8785.dumps(events)).hexdigest()


class Ratio(float):
    """A float subclass, which the fast packer refuses and msgpack packs as a float."""


@settings(max_examples=300, deadline=None)
@given(st.lists(any_json | finite_floats.map(Ratio), min_size=1, max_size=5))
def test_payloads_are_the_msgpack_of_the_events_with_their_ids(values: list[Any]) -> None:
    events = [_mutation(value) for value in values]
    prepared = prepare_append("s", "x", "a", events, Limits(artifact_threshold=None))
    ids = [derive_event_id("s", "x", "a", index) for index in range(len(events))]
    expected = [
        msgpack.packb({**event, "event_id": id_}, use_bin_type=True)
        for event, id_ in zip(events, ids, strict=True)
    ]
    assert prepared.payloads == expected


def test_events_over_the_event_limit_together_but_not_alone_are_accepted() -> None:
    events = [_mutation("x" * 40), _mutation("y" * 40)]
    limits = Limits(max_event_bytes=100)
    assert len(rfc8785.dumps(events)) > 100 > max(len(rfc8785.dumps(e)) for e in events)
    prepared = prepare_append("s", "x", "a", events, limits)
    assert prepared.digest == hashlib.sha256(rfc8785.dumps(events)).hexdigest()
    with pytest.raises(InvalidEvent) as raised:
        prepare_append("s", "x", "a", [*events, _mutation("z" * 100)], limits)
    assert raised.value.index == 2


def test_the_append_limit_counts_the_events_not_the_array_around_them() -> None:
    events = [_mutation("x" * 40), _mutation("y" * 40)]
    exact = sum(len(rfc8785.dumps(e)) for e in events)
    prepare_append("s", "x", "a", events, Limits(max_append_bytes=exact))
    with pytest.raises(InvalidEvent, match="exceeds"):
        prepare_append("s", "x", "a", events, Limits(max_append_bytes=exact - 1))


@pytest.mark.parametrize(
    ("events", "index"),
    [
        ([_mutation(math.nan), {"type": "nope", "agent": "a"}], 0),
        ([_mutation(1), {"type": "nope", "agent": "a"}, _mutation(math.nan)], 1),
        ([_mutation(1), _mutation(2), _mutation([math.inf])], 2),
    ],
)
def test_the_first_event_at_fault_is_named(events: list[Any], index: int) -> None:
    with pytest.raises(InvalidEvent) as raised:
        prepare_append("s", "x", "a", events, Limits())
    assert raised.value.index == index


JCS = ROOT / "conformance" / "jcs"


@pytest.mark.parametrize("name", sorted(p.name for p in (JCS / "input").glob("*.json")))
def test_the_rfc_8785_authors_vectors(name: str) -> None:
    value = json.loads((JCS / "input" / name).read_text("utf-8"))
    assert canonical_bytes(value) == (JCS / "output" / name).read_bytes()
