"""Example tests for the cpulist / nodelist / cpumask parsers and formatters,
and round trips of every cpulist and cpumask file this machine's kernel prints."""

from __future__ import annotations

import os
from typing import Dict, FrozenSet, Iterator, List, Tuple

import pytest
from hypothesis import given
from hypothesis import strategies as hyp_st

from pynumabind._text import EMPTY_IDS, format_ids
from pynumabind.cpulist import (
    DEFAULT_MAX_ID,
    format_cpulist,
    format_cpumask,
    parse_cpulist,
    parse_cpumask,
    parse_nodelist,
)
from pynumabind.errors import ListParseError, PynumabindError


def ids(*parts: object) -> FrozenSet[int]:
    """Build an expected set from ints and ``range``s (independent of the parser)."""
    out = set()
    for part in parts:
        if isinstance(part, range):
            out.update(part)
        else:
            assert isinstance(part, int)
            out.add(part)
    return frozenset(out)


# ------------------------------------------------------------ cpulists


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ids()),
        ("\n", ids()),
        ("  \t\n", ids()),
        ("0", ids(0)),
        ("7\n", ids(7)),
        ("0-3", ids(range(4))),
        ("0-3,8-11", ids(range(4), range(8, 12))),
        ("0-3,8-11\n", ids(range(4), range(8, 12))),
        ("5,3,4", ids(3, 4, 5)),  # order does not matter
        ("0-4,2-6,6", ids(range(7))),  # overlaps merge
        ("3-3", ids(3)),
        (" 0-1 , 4 ", ids(0, 1, 4)),
        ("007", ids(7)),  # leading zeros are decimal, as in the kernel
        ("010", ids(10)),
        ("65535", ids(65535)),
        # real published affinity strings (DGX H100, a cgroup-restricted 4x H100)
        ("0-55,112-167", ids(range(56), range(112, 168))),
        ("6,14,22,30", ids(6, 14, 22, 30)),
    ],
)
def test_parse_cpulist(text: str, expected: FrozenSet[int]) -> None:
    assert parse_cpulist(text) == expected
    assert parse_nodelist(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # lib/bitmap.c's own example: 0-1023:2/256 ==> 0,1,256,257,512,513,768,769
        ("0-1023:2/256", ids(0, 1, 256, 257, 512, 513, 768, 769)),
        # and its diagram: region 9-38:4/10 sets 9-12, 19-22, 29-32
        ("9-38:4/10", ids(range(9, 13), range(19, 23), range(29, 33))),
        ("0-31:4/8", ids(range(0, 4), range(8, 12), range(16, 20), range(24, 28))),
        ("0-9:3/4", ids(0, 1, 2, 4, 5, 6, 8, 9)),  # last group cut at the range end
        ("0-7:4/4", ids(range(8))),  # used == group: the whole range
        ("0-7:0/4", ids()),  # used 0 is legal in the kernel and sets nothing
        ("0-3:1/100000", ids(0)),  # group longer than the range
        ("0-3:1/4294967295", ids(0)),  # group is an unsigned int in the kernel
        ("2-2:1/1", ids(2)),
        ("0-3:0000000000001/0000000000002", ids(0, 2)),  # leading zeros, 13 digits
        ("0000000000000-0000000000003", ids(range(4))),
        ("0-3:1/2,8", ids(0, 2, 8)),
        (" 0-7:1/4 ,1", ids(0, 1, 4)),
    ],
)
def test_parse_group_form_like_the_kernel(text: str, expected: FrozenSet[int]) -> None:
    assert parse_cpulist(text) == expected


# ---------------------------------------------------- numactl-style lists

UNIVERSE = ids(range(8))
ALLOWED = ids(2, 3, 6, 7)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("all", UNIVERSE),
        (" all\n", UNIVERSE),
        ("!0-3", ids(range(4, 8))),
        ("!all", ids()),
        ("! 0", ids(range(1, 8))),
        ("!9", UNIVERSE),  # ids are not checked against the universe
        ("+0", ids(2)),
        ("+1-2", ids(3, 6)),
        ("+0,3", ids(2, 7)),
        ("+0-3:1/2", ids(2, 6)),
        ("+all", ALLOWED),
        ("!+0-1", UNIVERSE - ids(2, 3)),
        ("!+all", UNIVERSE - ALLOWED),
    ],
)
def test_parse_numactl_style(text: str, expected: FrozenSet[int]) -> None:
    assert parse_cpulist(text, universe=UNIVERSE, allowed=ALLOWED) == expected
    assert parse_nodelist(text, universe=UNIVERSE, allowed=ALLOWED) == expected


@pytest.mark.parametrize(
    ("text", "token", "position", "needs"),
    [
        ("all", "all", 0, "universe="),
        ("  all", "all", 2, "universe="),
        ("!0", "!", 0, "universe="),
        (" !all", "!", 1, "universe="),
        ("+0", "+", 0, "allowed="),
        ("!+0", "!", 0, "universe="),
    ],
)
def test_reference_set_required(text: str, token: str, position: int, needs: str) -> None:
    with pytest.raises(ListParseError) as info:
        parse_cpulist(text, universe=UNIVERSE if needs == "allowed=" else None)
    assert (info.value.token, info.value.position) == (token, position)
    assert needs in str(info.value)


def test_relative_needs_only_allowed() -> None:
    assert parse_cpulist("+1", allowed=ALLOWED) == ids(3)
    with pytest.raises(ListParseError) as info:
        parse_cpulist("!+1", allowed=ALLOWED)
    assert info.value.token == "!"


@pytest.mark.parametrize(
    ("text", "token", "position"),
    [("+4", "4", 1), ("+0-4", "4", 3), ("+0, 9", "9", 4), ("!+2,5", "5", 4)],
)
def test_relative_index_beyond_allowed(text: str, token: str, position: int) -> None:
    with pytest.raises(ListParseError) as info:
        parse_cpulist(text, universe=UNIVERSE, allowed=ALLOWED)
    assert (info.value.token, info.value.position) == (token, position)
    assert "4 allowed CPUs" in str(info.value)


def test_relative_to_empty_allowed_set_rejects_any_index() -> None:
    with pytest.raises(ListParseError, match="0 allowed nodes"):
        parse_nodelist("+0", allowed=frozenset())
    assert parse_nodelist("+all", allowed=frozenset()) == ids()


# ------------------------------------------------------------ rejections


@pytest.mark.parametrize(
    ("text", "token", "position", "message"),
    [
        ("0,,1", "", 2, "empty item"),
        (",0", "", 0, "empty item"),
        ("0,", "", 2, "empty item"),
        ("0, ,1", "", 3, "empty item"),
        ("!", "", 1, "empty item"),
        ("1-0", "1-0", 0, "descending range"),
        ("4,10-9", "10-9", 2, "descending range"),
        ("-1", "-1", 0, "negative id"),
        ("0,-1", "-1", 2, "negative id"),
        ("0--1", "0--1", 0, "malformed item"),
        ("0-", "0-", 0, "malformed item"),
        ("-", "-", 0, "negative id"),
        ("0 1", "0 1", 0, "malformed item"),
        ("0 - 1", "0 - 1", 0, "malformed item"),
        ("0\n1", "0\n1", 0, "malformed item"),
        ("0x1", "0x1", 0, "malformed item"),
        ("1e3", "1e3", 0, "malformed item"),
        ("1.0", "1.0", 0, "malformed item"),
        ("a", "a", 0, "malformed item"),
        ("0-1-2", "0-1-2", 0, "malformed item"),
        ("ALL", "ALL", 0, "malformed item"),
        ("1,all", "all", 2, "malformed item"),
        ("!!0", "!0", 1, "malformed item"),
        ("0;1", "0;1", 0, "malformed item"),
        ("\u0663", "\u0663", 0, "malformed item"),  # ARABIC-INDIC DIGIT THREE
        ("\uff11", "\uff11", 0, "malformed item"),  # FULLWIDTH DIGIT ONE
        ("\u00a00", "\u00a00", 0, "malformed item"),  # NO-BREAK SPACE is not C isspace
        ("0\u2003", "0\u2003", 0, "malformed item"),  # EM SPACE
        ("0\x00", "0\x00", 0, "malformed item"),
        ("1_000", "1_000", 0, "malformed item"),
        ("65536", "65536", 0, "exceeds the maximum 65535"),
        ("0-65536", "65536", 2, "exceeds the maximum 65535"),
        ("3, 0-4294967295", "4294967295", 5, "exceeds the maximum 65535"),
        ("99999999999999999999999", "99999999999999999999999", 0, "exceeds the maximum"),
        ("0-3:5/4", "0-3:5/4", 0, "bad group form"),
        ("0-3:1/0", "0-3:1/0", 0, "bad group form"),
        ("0-3:0/0", "0-3:0/0", 0, "bad group form"),
        ("0-3:1/4294967296", "0-3:1/4294967296", 0, "overflows 32 bits"),
        ("5:1/2", "5:1/2", 0, "group form needs a range"),
        ("0-3:1", "0-3:1", 0, "malformed item"),
        ("0-3:/4", "0-3:/4", 0, "malformed item"),
        ("0-3:1/4:1/2", "0-3:1/4:1/2", 0, "malformed item"),
        ("4-1:1/2", "4-1:1/2", 0, "descending range"),
        ("N", "N", 0, "malformed item"),
        ("0-N", "0-N", 0, "malformed item"),
    ],
)
def test_rejections_name_token_and_position(
    text: str, token: str, position: int, message: str
) -> None:
    for parse in (parse_cpulist, parse_nodelist):
        with pytest.raises(ListParseError) as info:
            parse(text, universe=UNIVERSE)
        error = info.value
        assert isinstance(error, ValueError)
        assert isinstance(error, PynumabindError)
        assert (error.token, error.position) == (token, position)
        assert message in str(error)
        assert text[position : position + len(token)] == token
        assert error.text == text


def test_plus_prefix_without_allowed_names_the_plus() -> None:
    with pytest.raises(ListParseError) as info:
        parse_cpulist("0,+1")
    assert (info.value.token, info.value.position) == ("+1", 2)
    assert "signed id" in str(info.value)


def test_long_tokens_are_shortened_in_errors() -> None:
    text = "0," + "x" * 10_000
    with pytest.raises(ListParseError) as info:
        parse_cpulist(text)
    assert info.value.position == 2
    assert len(info.value.token) <= 64
    assert info.value.token.endswith("...")
    assert len(str(info.value)) < 300


@pytest.mark.parametrize("value", [None, b"0-3", bytearray(b"0"), 3, 1.5, ["0"], ("0",), {0}])
def test_non_str_input_is_a_list_parse_error(value: object) -> None:
    for parse in (parse_cpulist, parse_nodelist):
        with pytest.raises(ListParseError) as info:
            parse(value)  # type: ignore[arg-type]
        assert info.value.position == 0
        assert type(value).__name__ in str(info.value)


def test_errors_about_huge_values_stay_short() -> None:
    for value in (b"x" * 10**7, ["0"] * 10**5, "0-3,x" + "y" * 10**6):
        for parse in (parse_cpulist, parse_cpumask):
            with pytest.raises(ListParseError) as info:
                parse(value)  # type: ignore[arg-type]
            assert len(str(info.value)) < 400
            assert len(info.value.token) <= 64
            if not isinstance(value, str):  # a str input is kept whole in .text
                assert len(info.value.text) <= 64


def test_max_id_is_configurable() -> None:
    assert parse_cpulist("99", max_id=99) == ids(99)
    assert parse_cpulist("0-99:1/50", max_id=99) == ids(0, 50)
    with pytest.raises(ListParseError, match="maximum 99") as info:
        parse_cpulist("98-100", max_id=99)
    assert (info.value.token, info.value.position) == ("100", 3)
    assert parse_cpulist("70000", max_id=100_000) == ids(70000)
    assert parse_cpulist("0", max_id=0) == ids(0)
    assert DEFAULT_MAX_ID == 65535


@pytest.mark.parametrize("max_id", [-1, 1.0, "10", None, True])
def test_bad_max_id_is_a_value_error(max_id: object) -> None:
    with pytest.raises(ValueError, match="max_id"):
        parse_cpulist("0", max_id=max_id)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_id"):
        parse_cpumask("1", max_id=max_id)  # type: ignore[arg-type]


def test_group_forms_have_a_total_budget() -> None:
    # Four passes over the whole id space at half density fit (2 * 65536 ranges)...
    four = ",".join(["0-65535:1/2", "1-65535:1/2"] * 2)
    assert parse_cpulist(four) == ids(range(65536))
    # ... one more range does not.
    with pytest.raises(ListParseError, match="group forms expand") as info:
        parse_cpulist(four + ",0-1:1/2")
    assert (info.value.token, info.value.position) == ("0-1:1/2", len(four) + 1)
    # Contiguous group forms (used == group) cost one range and are not limited.
    assert parse_cpulist(",".join(["0-65535:7/7"] * 1000)) == ids(range(65536))


# ---------------------------------------------------------- formatting


@pytest.mark.parametrize(
    ("values", "text"),
    [
        (ids(), ""),
        (ids(0), "0"),
        (ids(0, 1), "0-1"),
        (ids(0, 2), "0,2"),
        (ids(range(4), range(8, 12)), "0-3,8-11"),
        (ids(range(56), range(112, 168)), "0-55,112-167"),
        (ids(1, 3, 4, 5, 9), "1,3-5,9"),
        (ids(65535), "65535"),
        ([3, 1, 2, 2], "1-3"),
    ],
)
def test_format_cpulist(values: object, text: str) -> None:
    assert format_cpulist(values) == text  # type: ignore[arg-type]
    assert parse_cpulist(text) == frozenset(values)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [[-1], [0, -5], [1.0], ["1"], [None], [True]])
def test_format_rejects_non_ids(bad: List[object]) -> None:
    with pytest.raises(ValueError):
        format_cpulist(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        format_cpumask(bad)  # type: ignore[arg-type]


# ---------------------------------------------------------------- masks

MEMS_ONE_NODE = ",".join(["00000000"] * 31 + ["00000001"])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3", ids(0, 1)),  # Cpus_allowed on a 2-CPU machine
        ("3\n", ids(0, 1)),
        ("ff", ids(range(8))),
        ("FF", ids(range(8))),
        ("0x3", ids(0, 1)),
        ("00000000,00000001", ids(0)),
        ("1,00000000", ids(32)),
        ("80000000,00000001", ids(0, 63)),
        ("ffffffff,ffffffff", ids(range(64))),
        ("00ffffff,ffffffff,ffffffff,ffffffff", ids(range(120))),
        ("0000,00000000", ids()),
        (MEMS_ONE_NODE, ids(0)),  # Mems_allowed, MAX_NUMNODES = 1024
        ("", ids()),
        ("  \n", ids()),
    ],
)
def test_parse_kernel_mask(text: str, expected: FrozenSet[int]) -> None:
    assert parse_cpumask(text) == expected


@pytest.mark.parametrize(
    ("words", "word_bits", "expected"),
    [
        ([3], 64, ids(0, 1)),
        ([0, 1], 64, ids(64)),
        ([1 << 63, 1], 64, ids(63, 64)),
        ((2**64 - 1,), 64, ids(range(64))),
        ([], 64, ids()),
        ([0, 0, 0], 64, ids()),
        ([1, 1], 32, ids(0, 32)),
        ([0x80000000], 32, ids(31)),
    ],
)
def test_parse_nvml_words(words: object, word_bits: int, expected: FrozenSet[int]) -> None:
    assert parse_cpumask(words, word_bits=word_bits) == expected  # type: ignore[arg-type]


def test_parse_nvml_words_accepts_index_like_ints() -> None:
    ctypes = pytest.importorskip("ctypes")
    array = (ctypes.c_ulonglong * 2)(5, 1)
    assert parse_cpumask(array) == ids(0, 2, 64)
    assert parse_cpumask(iter([1, 2])) == ids(0, 65)


@pytest.mark.parametrize(
    ("text", "token", "position", "message"),
    [
        ("0,,1", "", 2, "empty mask word"),
        ("1,", "", 2, "empty mask word"),
        (",1", "", 0, "empty mask word"),
        ("0x", "", 2, "empty mask word"),
        ("123456789", "123456789", 0, "malformed mask word"),
        ("00000000,fffffffff", "fffffffff", 9, "malformed mask word"),
        ("g", "g", 0, "malformed mask word"),
        ("-1", "-1", 0, "malformed mask word"),
        ("1 ,2", "1 ", 0, "malformed mask word"),
        ("0-3", "0-3", 0, "malformed mask word"),
        ("\u0663", "\u0663", 0, "malformed mask word"),
        ("0x0x1", "0x1", 2, "malformed mask word"),
        ("1," + "00000000," * 2047 + "0", "1", 0, "exceeds the maximum 65535"),
        ("1" + ",0" * 3000, "1,0,0,0,", 0, "wider than"),
    ],
)
def test_mask_rejections(text: str, token: str, position: int, message: str) -> None:
    with pytest.raises(ListParseError) as info:
        parse_cpumask(text)
    assert (info.value.token, info.value.position) == (token, position)
    assert message in str(info.value)


def test_mask_max_id() -> None:
    assert parse_cpumask("ff", max_id=7) == ids(range(8))
    with pytest.raises(ListParseError, match="id 8 exceeds the maximum 7"):
        parse_cpumask("100", max_id=7)
    with pytest.raises(ListParseError, match="id 64 exceeds the maximum 63") as info:
        parse_cpumask([0, 1], max_id=63)
    assert info.value.position == 1


@pytest.mark.parametrize(
    ("words", "position", "token"),
    [
        ([-1], 0, "-1"),
        ([0, 2**64], 1, str(2**64)),
        ([True], 0, "True"),
        ([1.0], 0, "1.0"),
        (["1"], 0, "'1'"),
        ([None], 0, "None"),
    ],
)
def test_nvml_word_rejections(words: List[object], position: int, token: str) -> None:
    with pytest.raises(ListParseError, match="unsigned 64-bit") as info:
        parse_cpumask(words)  # type: ignore[arg-type]
    assert (info.value.position, info.value.token) == (position, token)


@pytest.mark.parametrize(
    "value", [None, 3, 1.5, b"\x03", bytearray(b"\x03"), memoryview(b"\x03"), {1}, {0: 1}]
)
def test_mask_of_wrong_type(value: object) -> None:
    with pytest.raises(ListParseError) as info:
        parse_cpumask(value)  # type: ignore[arg-type]
    assert type(value).__name__ in str(info.value)


@pytest.mark.parametrize("word_bits", [0, -64, 64.0, True])
def test_bad_word_bits(word_bits: object) -> None:
    with pytest.raises(ValueError, match="word_bits"):
        parse_cpumask([1], word_bits=word_bits)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("values", "nbits", "text"),
    [
        (ids(0, 1), 2, "3"),  # Cpus_allowed, nr_cpu_ids = 2
        (ids(0, 1), None, "3"),
        (ids(), None, "0"),
        (ids(), 0, ""),
        (ids(), 1, "0"),
        (ids(), 5, "00"),
        (ids(), 32, "00000000"),
        (ids(), 33, "0,00000000"),
        (ids(35), 36, "8,00000000"),
        (ids(32), None, "1,00000000"),
        (ids(range(64)), 64, "ffffffff,ffffffff"),
        (ids(0), 1024, MEMS_ONE_NODE),  # Mems_allowed
        (
            ids(range(0, 56), range(112, 168)),  # DGX H100 node 0 on a 224-CPU box
            224,
            "00000000,000000ff,ffffffff,ffff0000,00000000,00ffffff,ffffffff",
        ),
        (ids(range(8, 16)), 20, "0ff00"),
    ],
)
def test_format_cpumask(values: FrozenSet[int], nbits: object, text: str) -> None:
    assert format_cpumask(values, nbits) == text  # type: ignore[arg-type]
    assert parse_cpumask(text) == values


def test_format_cpumask_rejects_ids_beyond_nbits_and_bad_nbits() -> None:
    with pytest.raises(ValueError, match="does not fit in a 2-bit mask"):
        format_cpumask({2}, 2)
    for nbits in (-1, 2.0, "2", True):
        with pytest.raises(ValueError, match="nbits"):
            format_cpumask({0}, nbits)  # type: ignore[arg-type]


# ------------------------------------------- the kernel's own output, byte for byte

LIST_NAMES = {
    "cpulist",
    "local_cpulist",
    "shared_cpu_list",
    "possible",
    "present",
    "online",
    "offline",
    "isolated",
    "enabled",
    "nohz_full",
    "has_cpu",
    "has_memory",
    "has_normal_memory",
    "has_high_memory",
    "has_generic_initiator",
}
MASK_NAMES = {
    "cpumap",
    "local_cpus",
    "shared_cpu_map",
    "core_cpus",
    "package_cpus",
    "die_cpus",
    "cluster_cpus",
    "book_siblings",
    "drawer_siblings",
    "thread_siblings",
    "core_siblings",
}
ROOTS = ("/sys/devices/system/cpu", "/sys/devices/system/node")
MAX_DEPTH = 5  # cpu/cpuN/cache/indexN/shared_cpu_map is 3 below the root
MAX_FILES = 20_000


def _is_list_file(path: str) -> bool:
    name = os.path.basename(path)
    if name.endswith("_list") or name in {"cpulist", "local_cpulist"}:
        return True
    # possible, online, has_cpu...: lists only directly under cpu/ and node/
    # (cpu/cpuN/online, for one, is a 0/1 flag).
    return name in LIST_NAMES and os.path.dirname(path) in ROOTS


def _sysfs_files() -> Iterator[Tuple[str, str]]:
    """(kind, path) of cpulist and cpumask files: a bounded walk, no symlinks."""
    seen = 0
    for root in ROOTS:
        for directory, subdirs, files in os.walk(root, followlinks=False):
            depth = directory[len(root) :].count(os.sep)
            if depth >= MAX_DEPTH:
                subdirs[:] = []
            for name in files:
                path = os.path.join(directory, name)
                if name in MASK_NAMES:
                    yield "mask", path
                elif _is_list_file(path):
                    yield "list", path
                seen += 1
                if seen > MAX_FILES:
                    return
    pci = "/sys/bus/pci/devices"
    if os.path.isdir(pci):
        for device in sorted(os.listdir(pci))[:4096]:
            for name, kind in (("local_cpulist", "list"), ("local_cpus", "mask")):
                path = os.path.join(pci, device, name)
                if os.path.isfile(path):
                    yield kind, path


def _read(path: str) -> str:
    with open(path) as handle:
        return handle.read()


def _nr_cpu_ids() -> int:
    return max(parse_cpulist(_read("/sys/devices/system/cpu/possible"))) + 1


def _width_bits(mask: str) -> int:
    """A bitmap width that prints with as many digits as ``mask`` has."""
    chunks = mask.split(",")
    return 32 * (len(chunks) - 1) + 4 * len(chunks[0])


def test_every_sysfs_cpulist_and_cpumask_round_trips_byte_for_byte() -> None:
    files = list(_sysfs_files())
    kinds: Dict[str, int] = {"list": 0, "mask": 0}
    nr_cpu_ids = _nr_cpu_ids()
    for kind, path in files:
        try:
            raw = _read(path)
        except OSError:  # some attributes are unreadable or vanish (hotplug)
            continue
        assert raw.endswith("\n"), path
        printed = raw[:-1]
        if kind == "list":
            assert format_cpulist(parse_cpulist(raw)) == printed, path
        else:
            parsed = parse_cpumask(raw)
            assert format_cpumask(parsed, _width_bits(printed)) == printed, path
            # cpumaps are nr_cpu_ids bits wide: that width must print the same
            assert format_cpumask(parsed, nr_cpu_ids) == printed, path
        kinds[kind] += 1
    # Every kernel has cpu/possible, present and online; cpu0's topology masks
    # (or a node's cpumap) exist wherever sysfs is mounted.
    assert kinds["list"] >= 3 and kinds["mask"] >= 1, kinds


def test_sysfs_list_and_mask_of_the_same_set_agree() -> None:
    pairs = [
        ("/sys/devices/system/node/node0/cpulist", "/sys/devices/system/node/node0/cpumap"),
        (
            "/sys/devices/system/cpu/cpu0/topology/thread_siblings_list",
            "/sys/devices/system/cpu/cpu0/topology/thread_siblings",
        ),
        (
            "/sys/devices/system/cpu/cpu0/topology/package_cpus_list",
            "/sys/devices/system/cpu/cpu0/topology/package_cpus",
        ),
    ]
    checked = 0
    for list_path, mask_path in pairs:
        if not (os.path.exists(list_path) and os.path.exists(mask_path)):
            continue
        listed = parse_cpulist(_read(list_path))
        masked = parse_cpumask(_read(mask_path))
        assert listed == masked, (list_path, mask_path)
        assert format_cpumask(listed, _nr_cpu_ids()) == _read(mask_path)[:-1]
        checked += 1
    assert checked >= 1


def _status_fields() -> Dict[str, str]:
    fields = {}
    for line in _read("/proc/self/status").splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip("\t")
    return fields


def test_proc_self_status_allowed_sets_round_trip() -> None:
    fields = _status_fields()
    for key in ("Cpus_allowed", "Mems_allowed"):
        mask, listed = fields[key], fields[key + "_list"]
        parsed = parse_cpumask(mask)
        assert parsed == parse_cpulist(listed), key
        assert format_cpulist(parsed) == listed, key
        assert format_cpumask(parsed, _width_bits(mask)) == mask, key
    assert (
        format_cpumask(parse_cpumask(fields["Cpus_allowed"]), _nr_cpu_ids())
        == (fields["Cpus_allowed"])
    )
    assert parse_cpulist(fields["Cpus_allowed_list"]) == frozenset(os.sched_getaffinity(0))


# ------------------------------------------------- one formatter for ids


@given(hyp_st.frozensets(hyp_st.integers(0, 5000), max_size=60))
def test_messages_and_json_write_ids_with_one_formatter(ids: FrozenSet[int]) -> None:
    assert parse_cpulist(format_cpulist(ids)) == ids
    if ids:
        assert format_ids(ids) == format_cpulist(ids)
    else:
        # JSON and sysfs use the kernel's empty form; messages use one word.
        assert (format_cpulist(ids), format_ids(ids), EMPTY_IDS) == ("", "-", "-")
    assert format_ids(ids, empty="") == format_cpulist(ids)
