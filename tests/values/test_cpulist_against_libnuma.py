"""Differential tests: our numactl-style parser against libnuma's own.

``numa_parse_cpustring_all`` / ``numa_parse_nodestring_all`` (through
``tests/support/libnuma_oracle.py``) validate ids against this machine's possible CPUs
and nodes, so strings are generated within and around that universe and
ours gets the same set as ``universe=`` and ``allowed=``.  Both must give
the same set or both reject, except for the deliberate differences listed
in ``pynumabind.cpulist``'s docstring: each has a named predicate here that
excludes exactly the strings where libnuma reads the text differently, and
an example test that pins what each side does.  libnuma prints warnings on
stderr for ids it rejects; that is expected here.
"""

from __future__ import annotations

import re
import warnings
from typing import Callable, FrozenSet, List, Optional, Tuple

import pytest
from hypothesis import event, find, given, settings
from hypothesis import strategies as st

from pynumabind.cpulist import parse_cpulist, parse_nodelist
from pynumabind.errors import LibnumaUnavailableError, ListParseError

from ..support import libnuma_oracle as oracle

Parser = Callable[[str], Optional[FrozenSet[int]]]

C_SPACE = " \t\n\v\f\r"
U32 = 2**32


def _universes() -> Tuple[FrozenSet[int], FrozenSet[int]]:
    try:
        cpus = frozenset(range(oracle.configured_cpus()))
        nodes = frozenset(range(oracle.configured_nodes()))
    except LibnumaUnavailableError as exc:  # pragma: no cover - CI installs libnuma1
        pytest.skip(f"libnuma not available: {exc}")
    # libnuma's "all" is its possible set and "!" complements within
    # 0..configured-1; one universe= can stand for both only when they agree.
    if oracle.parse_cpustring_all("all") != cpus:
        pytest.skip("possible CPUs are not 0..configured-1 on this machine")
    if oracle.parse_nodestring_all("all") != nodes:
        pytest.skip("possible nodes are not 0..configured-1 on this machine")
    return cpus, nodes


CPUS, NODES = _universes()
if len(CPUS) < 2:  # pragma: no cover
    pytest.skip("the pinned examples need CPUs 0 and 1", allow_module_level=True)


def ours_cpus(text: str) -> Optional[FrozenSet[int]]:
    try:
        return parse_cpulist(text, universe=CPUS, allowed=CPUS)
    except ListParseError:
        return None


def ours_nodes(text: str) -> Optional[FrozenSet[int]]:
    try:
        return parse_nodelist(text, universe=NODES, allowed=NODES)
    except ListParseError:
        return None


# ------------------------------------------- the deliberate differences, by name


def _body(text: str) -> str:
    """``text`` without libnuma's prefixes (``!`` then ``+``, no whitespace skipped)."""
    if text.startswith("!"):
        text = text[1:]
    if text.startswith("+"):
        text = text[1:]
    return text


def reads_octal_or_hex(text: str) -> bool:
    """strtoul(s, &end, 0): ``0x1`` is hex, and ``010`` octal 8 (``08`` stops at 8)."""
    for match in re.finditer(r"(?<![0-9])0([xX][0-9a-fA-F]|[0-9]+)", text):
        digits = "0" + match.group(1)
        if digits[1] in "xX" or "8" in digits or "9" in digits:
            return True
        if int(digits, 8) != int(digits, 10):
            return True
    return False


def reads_a_sign(text: str) -> bool:
    """strtoul takes a sign before each number: ``-0`` is 0, ``0,+1`` is {0, 1}."""
    return re.search(f"(?:^|[,-])[{C_SPACE}]*[-+][0-9]", _body(text)) is not None


def whitespace_placed_differently(text: str) -> bool:
    """strtoul skips whitespace only before a number; we allow it around items.

    The one placement both accept: at the start of an item (string start
    after the prefixes, or after a comma) and directly before its digits.
    """
    body = _body(text)
    for match in re.finditer(f"[{C_SPACE}]+", body):
        before, after = body[: match.start()], body[match.end() : match.end() + 1]
        if not ((before == "" or before.endswith(",")) and after and after in "0123456789"):
            return True
    return False


def descending_range(text: str) -> bool:
    """libnuma turns ``1-0`` into {1}; we reject it."""
    return any(int(a) > int(b) for a, b in re.findall(r"([0-9]+)-([0-9]+)", text))


def all_after_items(text: str) -> bool:
    """libnuma takes ``all`` as the last of several items (``0,all``)."""
    return _body(text).endswith(",all")


def number_past_32_bits(text: str) -> bool:
    """libnuma truncates ids to unsigned int (``4294967296`` is 0); a range to
    such an id would loop ~2**32 times, so these never reach libnuma."""
    decimal = any(int(run) >= U32 for run in re.findall(r"[0-9]+", text))
    hexa = any(int(run, 16) >= U32 for run in re.findall(r"0[xX]([0-9a-fA-F]+)", text))
    return decimal or hexa


def group_form(text: str) -> bool:
    """The kernel's ``N-M:used/group``: ours accepts it, libnuma never does."""
    return re.search(r"[0-9]-[0-9]+:[0-9]+/[0-9]+", text) is not None


def has_nul(text: str) -> bool:
    """A C string ends at NUL; libnuma never sees what follows."""
    return "\x00" in text


DIFFERENCES: List[Callable[[str], bool]] = [
    has_nul,
    number_past_32_bits,
    reads_a_sign,
    reads_octal_or_hex,
    whitespace_placed_differently,
    descending_range,
    all_after_items,
    group_form,
]


def deliberate_difference(text: str) -> Optional[str]:
    """Name of the first deliberate difference ``text`` exercises, if any."""
    for predicate in DIFFERENCES:
        if predicate(text):
            return predicate.__name__
    return None


def names_id_outside(text: str, universe: FrozenSet[int]) -> bool:
    """An absolute id that is not on this machine: libnuma rejects it, we
    return it and leave the topology check to the caller."""
    rest = text[1:] if text.startswith("!") else text
    if rest.startswith("+"):
        return False  # relative: both check indices against the allowed set
    return any(int(run) not in universe for run in re.findall(r"[0-9]+", text))


# ----------------------------------------------- pinned examples of each

MISSING = max(CPUS) + 1  # a CPU this machine does not have


@pytest.mark.parametrize(
    ("text", "difference", "libnuma", "ours"),
    [
        ("0x1", "reads_octal_or_hex", frozenset({1}), None),
        ("010", "reads_octal_or_hex", frozenset({8}) & CPUS or None, frozenset({10})),
        ("08", "reads_octal_or_hex", None, frozenset({8})),
        ("-0", "reads_a_sign", frozenset({0}), None),
        ("0,+1", "reads_a_sign", frozenset({0, 1}), None),
        ("0--0", "reads_a_sign", frozenset({0}), None),
        ("0-\t1", "whitespace_placed_differently", frozenset({0, 1}), None),
        ("0\n", "whitespace_placed_differently", None, frozenset({0})),
        ("0 ", "whitespace_placed_differently", None, frozenset({0})),
        (" !0", "whitespace_placed_differently", None, CPUS - {0}),
        ("1-0", "descending_range", frozenset({1}), None),
        ("0,all", "all_after_items", CPUS, None),
        ("4294967296", "number_past_32_bits", frozenset({0}), None),
        ("0-1:1/2", "group_form", None, frozenset({0})),
    ],
)
def test_documented_difference(
    text: str, difference: str, libnuma: Optional[FrozenSet[int]], ours: Optional[FrozenSet[int]]
) -> None:
    assert deliberate_difference(text) == difference
    if difference != "number_past_32_bits" or "-" not in text:  # never give libnuma a long loop
        assert oracle.parse_cpustring_all(text) == libnuma
    assert ours_cpus(text) == ours


def test_id_outside_the_machine_is_left_to_the_caller() -> None:
    text = str(MISSING)
    assert deliberate_difference(text) is None
    assert names_id_outside(text, CPUS)
    assert oracle.parse_cpustring_all(text) is None
    assert ours_cpus(text) == frozenset({MISSING})


@pytest.mark.parametrize(
    "text",
    ["", "0", "1", "0-1", "0,1", "1,0", "0, 1", " 0", "\t1", "!0", "!1", "!0-1", "+0", "+1",
     "+0-1", "!+0", "all", "!all", "+all", "!+all", "00", "01-1", "!", "+", ",0", "0,", "0,,1",
     "0-", "-", "x", "all,0", "ALL", "!!0", "+!0", "0-1-1", "1e0", "0x"],
)  # fmt: skip
def test_agrees_with_libnuma_on_examples(text: str) -> None:
    assert deliberate_difference(text) is None
    for theirs, ours, universe in (
        (oracle.parse_cpustring_all, ours_cpus, CPUS),
        (oracle.parse_nodestring_all, ours_nodes, NODES),
    ):
        assert not _compare(text, theirs, ours, universe).startswith("excluded")


# ------------------------------------------------------- differential property


def _named(name: str, strategy: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """``strategy`` under the short repr ``name()``.

    The strategies below repeat sub-strategies inside ``one_of`` to weight them,
    so their written-out repr nests those repeats and runs to tens of kB; Hypothesis
    builds it (and warns: "overly large repr") when it reports on a ``find``.
    """

    def draw_from(draw: st.DrawFn) -> str:
        return draw(strategy)

    draw_from.__name__ = draw_from.__qualname__ = name
    return st.composite(draw_from)()


# Mostly ids in and just around the machine; now and then the far edges.
small = st.integers(0, max(3, len(CPUS) + 1))
numbers = st.one_of(
    *[small] * 6,
    st.sampled_from([7, 8, 9, 10, 63, 64, 255, 256, 1023, 1024, 65535, 65536]),
    st.sampled_from([U32 - 1, U32, U32 + 1, 2**64]),
)
number_texts = _named(
    "number_texts",
    st.one_of(
        *[numbers.map(str)] * 6,
        st.tuples(st.sampled_from(["0", "00"]), numbers).map(lambda t: f"{t[0]}{t[1]}"),
        numbers.map(hex),
        st.tuples(st.sampled_from(["-", "+"]), numbers).map(lambda t: f"{t[0]}{t[1]}"),
    ),
)
spaces = st.sampled_from(["", "", "", "", "", "", "", " ", "\t", "\n"])
item_texts = _named(
    "item_texts",
    st.one_of(
        number_texts,
        number_texts,
        st.tuples(number_texts, number_texts).map(lambda t: f"{t[0]}-{t[1]}"),
        st.tuples(number_texts, number_texts).map(lambda t: f"{t[0]}-{t[1]}"),
        st.tuples(number_texts, spaces, number_texts).map(lambda t: f"{t[0]}-{t[1]}{t[2]}"),
        st.tuples(number_texts, number_texts, number_texts, number_texts).map(
            lambda t: f"{t[0]}-{t[1]}:{t[2]}/{t[3]}"
        ),
    ),
)
bodies = _named(
    "bodies",
    st.one_of(
        st.just("all"),
        *[st.lists(st.tuples(spaces, item_texts, spaces).map("".join), max_size=4).map(",".join)]
        * 6,
        st.lists(item_texts, min_size=1, max_size=3).map(lambda xs: ",".join([*xs, "all"])),
    ),
)
prefixes = st.sampled_from(["", "", "", "", "!", "+", "!+", "+!", "++", " ", "!!"])
suffixes = st.sampled_from(["", "", "", "", "", "\n", " ", ","])


def numactl_strings(universe: FrozenSet[int]) -> st.SearchStrategy[str]:
    """Mostly well-formed decimal lists over ``universe`` (the cases both
    parsers should read alike), then rougher ones and random text."""
    inside = st.sampled_from(sorted(universe))
    clean_numbers = st.one_of(inside, inside, inside, small, st.sampled_from([8, 64, 65536]))
    clean_items = st.one_of(
        clean_numbers.map(str),
        st.tuples(clean_numbers, clean_numbers).map(lambda t: f"{t[0]}-{t[1]}"),
        st.tuples(st.sampled_from(["", " ", "\t"]), clean_numbers).map(lambda t: f"{t[0]}{t[1]}"),
    )
    clean_strings = st.tuples(
        st.sampled_from(["", "", "!", "+", "!+"]),
        st.one_of(st.just("all"), st.lists(clean_items, max_size=4).map(",".join)),
    ).map("".join)
    return st.one_of(
        clean_strings,
        clean_strings,
        clean_strings,
        st.tuples(prefixes, bodies, suffixes).map("".join),
        st.tuples(prefixes, bodies, suffixes).map("".join),
        st.text(alphabet="0123456789,-+! \tal:/x\n", max_size=12),
    )


def _compare(text: str, theirs: Parser, ours: Parser, universe: FrozenSet[int]) -> str:
    """Check ``text`` on both parsers; returns what kind of case it was."""
    difference = deliberate_difference(text)
    if difference is not None:
        return f"excluded: {difference}"
    expected = theirs(text)
    got = ours(text)
    if names_id_outside(text, universe):
        # libnuma rejects; ours gives the ids (the caller checks the topology)
        assert expected is None, (text, expected)
        kind = "id outside the machine"
    else:
        assert got == expected, (text, expected, got)
        kind = "both reject" if expected is None else "same set"
    return kind


@given(numactl_strings(CPUS))
def test_cpu_strings_agree_with_libnuma(text: str) -> None:
    event(_compare(text, oracle.parse_cpustring_all, ours_cpus, CPUS))


@given(numactl_strings(NODES))
def test_node_strings_agree_with_libnuma(text: str) -> None:
    event(_compare(text, oracle.parse_nodestring_all, ours_nodes, NODES))


@pytest.mark.parametrize("universe", [CPUS, NODES], ids=["cpus", "nodes"])
def test_generator_repr_is_short(universe: FrozenSet[int]) -> None:
    """Hypothesis writes out the strategy's repr when it reports on a ``find``
    and warns ("overly large repr") past 30 kB; the test run stays quiet."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(repr(numactl_strings(universe))) < 10_000


@pytest.mark.parametrize(
    ("theirs", "ours", "universe"),
    [
        (oracle.parse_cpustring_all, ours_cpus, CPUS),
        (oracle.parse_nodestring_all, ours_nodes, NODES),
    ],
    ids=["cpus", "nodes"],
)
@pytest.mark.parametrize("kind", ["same set", "both reject"])
def test_generator_reaches_compared_cases(
    theirs: Callable[[str], Optional[FrozenSet[int]]],
    ours: Callable[[str], Optional[FrozenSet[int]]],
    universe: FrozenSet[int],
    kind: str,
) -> None:
    """The differential properties are not vacuous: their generator yields strings
    that both parsers are compared on, accepted and rejected alike."""
    strings = numactl_strings(universe)
    found = find(
        strings,
        lambda text: _compare(text, theirs, ours, universe) == kind,
        settings=settings(max_examples=5000, database=None),
    )
    assert _compare(found, theirs, ours, universe) == kind
