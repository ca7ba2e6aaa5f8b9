"""Hypothesis properties of the cpulist / cpumask parsers and formatters.

The expected values come from independent models: a set is built id by id
from a description of each item (``(i - first) % group < used`` for the
group form), and masks are compared through plain Python integers.  Run
with ``HYPOTHESIS_PROFILE=fuzz`` (``tox -e fuzz``) for >= 100,000 examples
per property.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Tuple

from hypothesis import given, note
from hypothesis import strategies as st

from pynumabind import cpulist
from pynumabind.cpulist import (
    format_cpulist,
    format_cpumask,
    parse_cpulist,
    parse_cpumask,
    parse_nodelist,
)
from pynumabind.errors import ListParseError

MAX = 300  # generated ids cross several 32- and 64-bit words and stay fast
WS_CHARS = " \t\n\v\f\r"

# The accepted grammar, written out independently of the parser.
_WS = "[ \t\n\v\f\r]*"
_ITEM = "[0-9]+(?:-[0-9]+(?::[0-9]+/[0-9]+)?)?"
LIST_GRAMMAR = re.compile(
    f"{_WS}|{_WS}!?\\+?{_WS}(?:all|{_ITEM}(?:{_WS},{_WS}{_ITEM})*){_WS}", re.ASCII
)
MASK_GRAMMAR = re.compile(f"{_WS}|{_WS}(?:0[xX])?[0-9a-fA-F]{{1,8}}(?:,[0-9a-fA-F]{{1,8}})*{_WS}")
# Errors that a string matching the grammar may still get (values, not syntax).
SEMANTIC_ERRORS = (
    "descending range",
    "exceeds the maximum",
    "bad group form",
    "overflows 32 bits",
    "group forms expand",
    "needs the machine's",
    "needs the allowed",
    "relative index",
)


@st.composite
def clustered_sets(draw: Callable[..., Any], max_id: int = MAX) -> FrozenSet[int]:
    """Sets made of a few runs, like real CPU lists (and their neighbours)."""
    runs = draw(
        st.lists(st.tuples(st.integers(0, max_id), st.integers(0, 70)), min_size=0, max_size=6)
    )
    return frozenset(i for lo, n in runs for i in range(lo, min(lo + n, max_id) + 1))


id_sets = st.one_of(st.frozensets(st.integers(0, MAX), max_size=40), clustered_sets())


def _item(
    *,
    first: int,
    kind: int,
    span: int,
    group: int,
    used_share: float,
    zeros: str,
    ws: Tuple[str, str],
) -> Tuple[str, FrozenSet[int]]:
    """Text of one item and the ids it means, per the kernel's definition."""
    last = min(first + span, MAX)
    if kind == 0:
        text, expected = zeros + str(first), frozenset({first})
    else:
        text = f"{zeros}{first}-{last}"
        expected = frozenset(range(first, last + 1))
        if kind == 2:
            used = round(used_share * group)
            text += f":{zeros}{used}/{zeros}{group}"
            expected = frozenset(i for i in expected if (i - first) % group < used)
    return ws[0] + text + ws[1], expected


# Leading zeros are decimal; whitespace (C isspace) may surround any item.
items = st.builds(
    _item,
    first=st.integers(0, MAX),
    kind=st.sampled_from([0, 1, 2]),
    span=st.integers(0, 200),
    group=st.integers(1, 80),
    used_share=st.floats(0, 1),
    zeros=st.sampled_from(["", "", "", "", "0", "000", "0" * 12]),
    ws=st.sampled_from([("", ""), ("", ""), ("", ""), (" ", ""), ("\t", " "), ("\n ", "\n")]),
)


@st.composite
def lists(draw: Callable[..., Any], min_items: int = 0) -> Tuple[str, FrozenSet[int]]:
    """A whole list's text (maybe with a trailing newline) and its ids."""
    parts = draw(st.lists(items, min_size=min_items, max_size=6))
    text = ",".join(t for t, _ in parts)
    expected = frozenset().union(*(e for _, e in parts))
    return text + draw(st.sampled_from(["", "", "\n"])), expected


def as_int(ids: FrozenSet[int]) -> int:
    return sum(1 << i for i in ids)


def check_error(error: ListParseError, text: str) -> None:
    """An error names a real token of ``text`` at its position."""
    assert 0 <= error.position <= len(text)
    if error.token.endswith("...") and len(error.token) == 64:
        assert text.startswith(error.token[:-3], error.position)
    else:
        assert text.startswith(error.token, error.position)


# ------------------------------------------------------------- round trips


@given(lists())
def test_parse_matches_the_item_model(case: Tuple[str, FrozenSet[int]]) -> None:
    text, expected = case
    assert parse_cpulist(text) == expected
    assert parse_nodelist(text) == expected


@given(id_sets)
def test_parse_of_format_is_identity(ids: FrozenSet[int]) -> None:
    text = format_cpulist(ids)
    assert parse_cpulist(text) == ids
    assert parse_cpulist(text + "\n") == ids  # as sysfs prints it


@given(lists())
def test_format_of_parse_is_canonical(case: Tuple[str, FrozenSet[int]]) -> None:
    text, expected = case
    canonical = format_cpulist(parse_cpulist(text))
    assert canonical == format_cpulist(expected)
    assert format_cpulist(parse_cpulist(canonical)) == canonical
    # The kernel's %*pbl: ascending, maximal runs, "a-b" only for a < b.
    previous = -2
    for part in canonical.split(",") if canonical else []:
        lo, _, hi = part.partition("-")
        low, high = int(lo), int(hi or lo)
        assert str(low) == lo and (not hi or (str(high) == hi and low < high))
        assert low > previous + 1
        previous = high


@given(id_sets, st.integers(0, 200))
def test_mask_round_trip_and_kernel_layout(ids: FrozenSet[int], extra: int) -> None:
    nbits = (max(ids) + 1 if ids else 0) + extra
    mask = format_cpumask(ids, nbits)
    assert parse_cpumask(mask) == ids
    chunks = mask.split(",") if nbits else []
    assert len(chunks) == (nbits + 31) // 32
    if chunks:
        assert len(chunks[0]) == ((nbits % 32 or 32) + 3) // 4
        assert all(len(c) == 8 for c in chunks[1:])
    assert re.fullmatch("[0-9a-f,]*", mask)
    assert int(mask.replace(",", "") or "0", 16) == as_int(ids)


@given(id_sets)
def test_mask_and_list_agree(ids: FrozenSet[int]) -> None:
    assert parse_cpumask(format_cpumask(ids)) == parse_cpulist(format_cpulist(ids)) == ids
    value = as_int(ids)
    for word_bits in (64, 32):
        count = max(1, (value.bit_length() + word_bits - 1) // word_bits)
        words = [(value >> (word_bits * k)) & ((1 << word_bits) - 1) for k in range(count)]
        assert parse_cpumask(words, word_bits=word_bits) == ids
        assert parse_cpumask([*words, 0], word_bits=word_bits) == ids


# ------------------------------------------------- complement and relative


@given(lists(min_items=1), id_sets)
def test_complement_is_within_universe(case: Tuple[str, FrozenSet[int]], universe: Any) -> None:
    text, expected = case
    assert parse_cpulist("!" + text, universe=universe) == universe - expected
    assert parse_cpulist(" !" + text.lstrip(WS_CHARS), universe=universe) == universe - expected
    assert parse_cpulist("!all", universe=universe) == frozenset()
    assert parse_cpulist("all", universe=universe) == universe


@given(st.frozensets(st.integers(0, MAX), min_size=1, max_size=60), st.data())
def test_relative_indexes_the_allowed_set(allowed: FrozenSet[int], data: st.DataObject) -> None:
    ordered = sorted(allowed)
    index_sets = st.frozensets(st.integers(0, len(ordered) - 1), min_size=1)
    indices = data.draw(index_sets)
    universe = data.draw(id_sets)
    text = format_cpulist(indices)
    chosen = frozenset(ordered[i] for i in indices)
    assert parse_cpulist("+" + text, allowed=allowed) == chosen
    assert parse_cpulist("!+" + text, universe=universe, allowed=allowed) == universe - chosen
    assert parse_cpulist("+all", allowed=allowed) == allowed
    beyond = data.draw(st.integers(len(ordered), len(ordered) + 500))
    bad = f"+{text},{beyond}"
    try:
        parse_cpulist(bad, allowed=allowed)
    except ListParseError as error:
        assert error.token == str(beyond)
        assert error.position == len(bad) - len(str(beyond))
    else:
        raise AssertionError(f"index {beyond} of {len(ordered)} accepted")


@given(lists(min_items=1))
def test_prefixes_without_reference_sets_are_rejected(case: Tuple[str, FrozenSet[int]]) -> None:
    text, _ = case
    for prefixed, token in (("!" + text, "!"), ("+" + text, "+"), ("all", "all")):
        try:
            parse_cpulist(prefixed)
        except ListParseError as error:
            assert error.token == token
            assert error.position == 0
        else:
            raise AssertionError(f"{prefixed!r} parsed without its reference set")


# --------------------------------------------------------------- garbage

GARBAGE_ALPHABET = "0123456789,-:/!+ \t\n\v\r\x00alxN."
# Characters Python (str.strip, \\d, int) reads as space or digit but C does not.
CONFUSABLES = "\u00a0\u2003\u3000\x1c\x1f\x85\u0663\uff11\u00b2\x00_"


def _insert(text: str, at: int, extra: str) -> str:
    at = min(at, len(text))
    return text[:at] + extra + text[at:]


# Numbers of any length (leading zeros included) joined by the list's operators.
digit_runs = st.builds(
    lambda zeros, digits: zeros + digits,
    st.text("0", max_size=14),
    st.text("0123456789", min_size=1, max_size=12),
)
number_soup = st.lists(
    st.tuples(digit_runs, st.sampled_from(["", "-", ":", "/", ",", " "])).map("".join),
    max_size=8,
).map("".join)
garbage = st.one_of(
    number_soup,
    st.text(alphabet=GARBAGE_ALPHABET + CONFUSABLES, max_size=40),
    st.text(alphabet="0123456789-,: /" + CONFUSABLES, max_size=12),
    st.text(max_size=40),
    # a valid list with a little damage: garbage or a confusable character
    st.builds(
        _insert,
        lists().map(lambda case: case[0]),
        st.one_of(st.just(0), st.just(999), st.integers(0, 60)),  # ends are special
        st.text(GARBAGE_ALPHABET, min_size=1, max_size=3) | st.sampled_from(CONFUSABLES),
    ),
)
reference_sets = st.one_of(st.none(), id_sets)


@given(garbage, reference_sets, reference_sets, st.sampled_from([0, 7, 300, 65535]))
def test_any_text_gives_a_set_or_a_list_parse_error(
    text: str,
    universe: Optional[FrozenSet[int]],
    allowed: Optional[FrozenSet[int]],
    max_id: int,
) -> None:
    try:
        result = parse_cpulist(text, universe=universe, allowed=allowed, max_id=max_id)
    except ListParseError as error:
        check_error(error, text)
        if LIST_GRAMMAR.fullmatch(text):
            note(str(error))
            assert any(kind in str(error) for kind in SEMANTIC_ERRORS)
        return
    assert LIST_GRAMMAR.fullmatch(text), f"accepted off-grammar text {text!r}"
    assert isinstance(result, frozenset)
    relative_or_all = text.strip(WS_CHARS).lstrip("!").startswith("+") or "all" in text
    if not text.strip(WS_CHARS).startswith("!") and not relative_or_all:
        assert all(0 <= i <= max_id for i in result)


@given(
    st.one_of(
        st.text(alphabet="0123456789abcdefABCDEFxX, \t\n-g\u0663", max_size=60),
        st.text(max_size=30),
    ),
    st.sampled_from([7, 300, 65535]),
)
def test_any_mask_text_gives_a_set_or_a_list_parse_error(text: str, max_id: int) -> None:
    try:
        result = parse_cpumask(text, max_id=max_id)
    except ListParseError as error:
        check_error(error, text)
        return
    assert MASK_GRAMMAR.fullmatch(text), f"accepted off-grammar mask {text!r}"
    body = text.strip(WS_CHARS)
    body = body[2:] if body[:2] in ("0x", "0X") else body
    expected = 0
    for word in body.split(",") if body else []:
        expected = (expected << 32) | int(word, 16)
    assert as_int(result) == expected
    assert all(i <= max_id for i in result)


@given(st.lists(st.integers(-(2**70), 2**70), max_size=6), st.sampled_from([8, 32, 64]))
def test_any_int_words_give_their_bits_or_a_list_parse_error(
    words: List[int], word_bits: int
) -> None:
    try:
        result = parse_cpumask(words, word_bits=word_bits)
    except ListParseError as error:
        assert 0 <= error.position < len(words)
        bad = words[error.position]
        assert bad < 0 or bad >> word_bits or "exceeds the maximum" in str(error)
        return
    assert all(0 <= w < 2**word_bits for w in words)
    assert as_int(result) == sum(w << (word_bits * k) for k, w in enumerate(words))


non_strings = st.one_of(
    st.none(),
    st.binary(max_size=10),
    st.integers(),
    st.floats(),
    st.booleans(),
    st.lists(st.text(max_size=3), max_size=3),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    st.frozensets(st.integers(), max_size=3),
)


@given(non_strings)
def test_non_strings_are_list_parse_errors(value: object) -> None:
    for parse in (parse_cpulist, parse_nodelist):
        try:
            parse(value)  # type: ignore[arg-type]
        except ListParseError as error:
            assert error.position == 0
        else:
            raise AssertionError(f"{value!r} parsed as a list")
    try:
        parse_cpumask(value)  # type: ignore[arg-type]
    except ListParseError:
        pass
    else:
        assert value == [], value  # an empty list is the only valid (empty) word sequence


# ---------------------------------------------------------- hostile sizes


class _CountingPattern:
    """Stands in for the parser's item regex and counts the matches it runs."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern = pattern
        self.calls = 0

    def match(self, text: str, pos: int, endpos: int) -> Optional[re.Match[str]]:
        self.calls += 1
        return self.pattern.match(text, pos, endpos)


SLACK = 16


def measured(text: str, max_id: int) -> Tuple[Any, Dict[str, Any]]:
    """Parse ``text``, recording every merge's input size and every item match."""
    merges: List[int] = []
    original_merge = cpulist._merge
    original_item = cpulist._ITEM_AT
    original_slack = cpulist._MERGE_SLACK
    counter = _CountingPattern(original_item)

    def counting_merge(intervals: List[Tuple[int, int]]) -> List[Tuple[int, int]]:
        merges.append(len(intervals))
        return original_merge(intervals)

    cpulist._merge = counting_merge  # type: ignore[assignment]
    cpulist._ITEM_AT = counter  # type: ignore[assignment]
    cpulist._MERGE_SLACK = SLACK  # small, so that the memory bound bites on small inputs
    try:
        try:
            result: Any = parse_cpulist(text, max_id=max_id)
        except ListParseError as error:
            result = error
    finally:
        cpulist._merge = original_merge  # type: ignore[assignment]
        cpulist._ITEM_AT = original_item
        cpulist._MERGE_SLACK = original_slack
    return result, {"merges": merges, "matches": counter.calls}


hostile_items = st.one_of(
    st.sampled_from(["0", "0-65535", "1-5", "0-4095:1/2", "7-4000:3/7", "0-4095:0/9", "x", ""]),
    items.map(lambda case: case[0]),
)


@given(
    hostile_items,
    st.integers(1, 3000),
    st.sampled_from(["", ",", ",x", "9" * 5000, "0-9" + "9" * 5000]),
    st.sampled_from([7, 255, 4095, 65535]),
)
def test_hostile_sizes_do_bounded_work(item: str, repeat: int, tail: str, max_id: int) -> None:
    """Work is linear in the items and memory bounded by max_id, whatever the input.

    Counted, not timed: one item match per comma-separated item, merges that
    touch at most O(items + max_id) runs in all, and no pending list longer
    than O(max_id).  The 5000-digit tails would make int() raise ValueError
    on Python >= 3.11 if a long number ever reached it.
    """
    text = ",".join([item] * repeat) + tail
    result, work = measured(text, max_id)
    assert isinstance(result, (frozenset, ListParseError))
    if isinstance(result, frozenset):
        assert len(result) <= max_id + 1
    items_count = text.count(",") + 1
    assert work["matches"] <= items_count
    group_budget = 2 * (max_id + 1)
    longest_pending = 2 * ((max_id + 2) // 2) + SLACK + group_budget + 1
    assert max(work["merges"], default=0) <= longest_pending
    assert sum(work["merges"]) <= 2 * (items_count + group_budget) + longest_pending


@given(st.integers(1, 200_000), st.sampled_from(["0", " ", "1", "-", ","]), st.booleans())
def test_long_runs_of_one_character_are_cheap(length: int, char: str, first: bool) -> None:
    text = char * length + "5" if first else "5" + char * length
    result, work = measured(text, 65535)
    assert isinstance(result, (frozenset, ListParseError))
    assert work["matches"] <= text.count(",") + 1
    if isinstance(result, ListParseError):
        assert len(result.token) <= 64 and len(str(result)) < 400


# The plain lists' fast path (cpulist._plain_items) against the full parser.
_PLAIN_TEXT = st.text(alphabet="0123456789,-", max_size=24) | st.builds(
    ",".join,
    st.lists(
        st.tuples(st.integers(0, MAX + 5), st.integers(0, MAX + 5)).map(
            lambda pair: f"{pair[0]}" if pair[0] == pair[1] else f"{pair[0]}-{pair[1]}"
        ),
        max_size=8,
    ),
)


@given(_PLAIN_TEXT)
def test_the_plain_lists_fast_path_agrees_with_the_full_parser(text: str) -> None:
    fast = cpulist._plain_items(text, MAX)
    note(f"fast path: {fast!r}")
    try:
        full: Optional[List[int]] = cpulist._parse_items(
            text, 0, len(text), limit=MAX, limit_message="over"
        )
    except ListParseError:
        full = None
    if fast is not None:  # what it accepts, the full parser gives the same ids
        assert fast == full
    elif full is not None:  # what it leaves and the full parser takes: an id longer than MAX's
        assert any(len(number) > len(str(MAX)) for number in re.findall("[0-9]+", text)), text


def test_the_plain_lists_fast_path_leaves_what_it_cannot_take() -> None:
    assert cpulist._plain_items("0-3,8-11", MAX) == [0, 1, 2, 3, 8, 9, 10, 11]
    assert cpulist._plain_items("5,1-2,2", MAX) == [1, 2, 5]
    for text in ("", "1,,2", "1-", "-1", "3-1", "1-2-3", "0 ,1", "0-7:2/4", f"{MAX + 1}", "٣"):
        assert cpulist._plain_items(text, MAX) is None, text
