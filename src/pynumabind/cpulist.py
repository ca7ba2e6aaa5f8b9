"""Parsers and formatters for CPU lists, node lists and hex cpumasks.

Pure functions, no I/O.  Three text formats reach the library:

* the Linux *cpulist* that sysfs prints and users type (``0-3,8-11``,
  including the kernel's group form ``0-31:4/8``);
* numactl-style lists (``all``, ``!0-3``, ``+0-1``) so users can reuse their
  numactl strings; these need a reference set;
* hex *cpumasks*, as the kernel prints them (32-bit words, most significant
  first) and as NVML returns them (64-bit integers, least significant first).

The work is bounded by ``max_id`` (default 65535) before any set is built,
so hostile input such as ``0-4294967295`` is rejected cheaply.
"""

from __future__ import annotations

import re
from typing import AbstractSet, Iterable, List, Optional, Sequence, Tuple, Union

from .errors import ListParseError

__all__ = [
    "DEFAULT_MAX_ID",
    "format_cpulist",
    "format_cpumask",
    "format_nodelist",
    "parse_cpulist",
    "parse_cpumask",
    "parse_nodelist",
]

DEFAULT_MAX_ID = 65535

_ITEM = re.compile(r"(\d+)(?:-(\d+)(?::(\d+)/(\d+))?)?\Z")
_HEX_WORD = re.compile(r"[0-9a-fA-F]{1,8}\Z")

Interval = Tuple[int, int]


def _fail(message: str, text: str, token: str, position: int) -> ListParseError:
    return ListParseError(message, text=text, token=token, position=position)


def _parse_number(digits: str, text: str, position: int, max_id: int) -> int:
    # Check the length first: int() on a huge digit string is itself costly.
    if len(digits) > len(str(max_id)) + 1 or int(digits) > max_id:
        raise _fail(f"id exceeds the maximum {max_id}", text, digits, position)
    return int(digits)


def _parse_item(
    item: str, text: str, position: int, max_id: int, budget: List[int]
) -> List[Interval]:
    """Parse one comma-separated item into inclusive intervals."""
    match = _ITEM.match(item)
    if match is None:
        what = "negative id" if item.startswith("-") else "malformed item"
        if not item:
            what = "empty item"
        raise _fail(what, text, item, position)
    first = _parse_number(match.group(1), text, position, max_id)
    if match.group(2) is None:
        return [(first, first)]
    last = _parse_number(match.group(2), text, position + match.start(2), max_id)
    if last < first:
        raise _fail("descending range", text, item, position)
    if match.group(3) is None:
        return [(first, last)]
    used = int(match.group(3)) if len(match.group(3)) < 7 else max_id + 1
    group = int(match.group(4)) if len(match.group(4)) < 7 else max_id + 1
    if group == 0 or used == 0 or used > group or group > max_id + 1:
        raise _fail("bad group form (want used/group with 0 < used <= group)", text, item, position)
    count = (last - first) // group + 1
    budget[0] -= count
    if budget[0] < 0:
        raise _fail("list expands to too many ranges", text, item, position)
    return [(start, min(start + used - 1, last)) for start in range(first, last + 1, group)]


def _parse_plain(text: str, body: str, offset: int, max_id: int) -> List[Interval]:
    """Parse a plain cpulist body that starts at character ``offset`` of ``text``."""
    intervals: List[Interval] = []
    # At most ~4 ranges per id plus one per input character: linear in input.
    budget = [len(text) + 4 * (max_id + 1)]
    position = offset
    for raw in body.split(","):
        stripped = raw.strip()
        lead = len(raw) - len(raw.lstrip())
        intervals.extend(_parse_item(stripped, text, position + lead, max_id, budget))
        position += len(raw) + 1
    return intervals


def _to_set(intervals: Iterable[Interval]) -> frozenset[int]:
    """Merge intervals before expanding so duplicates cost nothing."""
    merged: List[Interval] = []
    for lo, hi in sorted(intervals):
        if merged and lo <= merged[-1][1] + 1:
            if hi > merged[-1][1]:
                merged[-1] = (merged[-1][0], hi)
        else:
            merged.append((lo, hi))
    out: set[int] = set()
    for lo, hi in merged:
        out.update(range(lo, hi + 1))
    return frozenset(out)


def _parse_list(
    text: str,
    kind: str,
    universe: Optional[AbstractSet[int]],
    allowed: Optional[AbstractSet[int]],
    max_id: int,
) -> frozenset[int]:
    if not isinstance(text, str):
        raise ListParseError(
            f"{kind} list must be a string, not {type(text).__name__}",
            text=repr(text),
            token=repr(text),
            position=0,
        )
    body = text.strip()
    offset = len(text) - len(text.lstrip())
    invert = body.startswith("!")
    if invert:
        body, offset = body[1:], offset + 1
        if universe is None:
            raise _fail(f"'!' needs the machine's {kind}s (universe=)", text, "!", offset - 1)
    relative = body.startswith("+")
    if relative:
        body, offset = body[1:], offset + 1
        if allowed is None:
            raise _fail(f"'+' needs the allowed {kind}s (allowed=)", text, "+", offset - 1)
    if body.strip() == "all":
        if universe is None:
            raise _fail(f"'all' needs the machine's {kind}s (universe=)", text, "all", offset)
        ids: frozenset[int] = frozenset(universe)
        if relative:
            raise _fail("'+' cannot be combined with 'all'", text, "+all", offset - 1)
    elif body == "" and not invert and not relative:
        return frozenset()
    else:
        ids = _to_set(_parse_plain(text, body, offset, max_id))
        if relative:
            assert allowed is not None
            ordered = sorted(allowed)
            beyond = [i for i in ids if i >= len(ordered)]
            if beyond:
                raise _fail(
                    f"relative index beyond the {len(ordered)} allowed {kind}s",
                    text,
                    str(min(beyond)),
                    offset,
                )
            ids = frozenset(ordered[i] for i in ids)
    if invert:
        assert universe is not None
        ids = frozenset(universe) - ids
    return ids


def parse_cpulist(
    text: str,
    *,
    universe: Optional[AbstractSet[int]] = None,
    allowed: Optional[AbstractSet[int]] = None,
    max_id: int = DEFAULT_MAX_ID,
) -> frozenset[int]:
    """Parse a cpulist (``0-3,8-11``, ``0-31:4/8``) or numactl-style CPU string.

    ``universe`` (all of the machine's CPUs) enables ``all`` and ``!``;
    ``allowed`` (this process's CPUs) enables ``+`` (indices into it).
    """
    return _parse_list(text, "CPU", universe, allowed, max_id)


def parse_nodelist(
    text: str,
    *,
    universe: Optional[AbstractSet[int]] = None,
    allowed: Optional[AbstractSet[int]] = None,
    max_id: int = DEFAULT_MAX_ID,
) -> frozenset[int]:
    """Parse a node list; same grammar as :func:`parse_cpulist`."""
    return _parse_list(text, "node", universe, allowed, max_id)


def format_cpulist(ids: Iterable[int]) -> str:
    """Canonical cpulist, byte-identical to the kernel's ``%*pbl`` (no newline)."""
    ordered = sorted(set(ids))
    if ordered and ordered[0] < 0:
        raise ValueError(f"negative id {ordered[0]} cannot be formatted")
    parts: List[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


format_nodelist = format_cpulist


def parse_cpumask(
    mask: Union[str, Sequence[int]], *, max_id: int = DEFAULT_MAX_ID, word_bits: int = 64
) -> frozenset[int]:
    """Parse a hex cpumask.

    A string is the kernel's form: comma-separated 32-bit hex words, most
    significant first (``/proc/self/status`` Cpus_allowed, sysfs
    ``local_cpus``).  A sequence of integers is NVML's form: ``word_bits``-bit
    words, least significant first.
    """
    ids: set[int] = set()
    if isinstance(mask, str):
        text = mask
        body = text.strip()
        offset = len(text) - len(text.lstrip())
        if body[:2] in ("0x", "0X"):
            body, offset = body[2:], offset + 2
        words = body.split(",")
        if len(words) * 32 > max_id + 1 + 32 * 64:
            raise _fail("mask wider than the id bound allows", text, body[:16], offset)
        position = offset
        for index, word in enumerate(words):
            if not _HEX_WORD.match(word):
                raise _fail("malformed mask word", text, word, position)
            value = int(word, 16)
            base = 32 * (len(words) - 1 - index)
            while value:
                low = value & -value
                bit = base + low.bit_length() - 1
                if bit > max_id:
                    raise _fail(f"id {bit} exceeds the maximum {max_id}", text, word, position)
                ids.add(bit)
                value ^= low
            position += len(word) + 1
        return frozenset(ids)
    text = repr(list(mask)) if not isinstance(mask, (bytes, bytearray)) else repr(mask)
    for index, word_value in enumerate(mask):
        if (
            not isinstance(word_value, int)
            or isinstance(word_value, bool)
            or word_value < 0
            or word_value >> word_bits
        ):
            raise _fail(
                f"mask word is not an unsigned {word_bits}-bit integer",
                text,
                repr(word_value),
                index,
            )
        value = word_value
        base = word_bits * index
        while value:
            low = value & -value
            bit = base + low.bit_length() - 1
            if bit > max_id:
                raise _fail(f"id {bit} exceeds the maximum {max_id}", text, repr(word_value), index)
            ids.add(bit)
            value ^= low
    return frozenset(ids)


def format_cpumask(ids: Iterable[int], nbits: Optional[int] = None) -> str:
    """Kernel-style hex mask (``%*pb``) of a bitmap ``nbits`` wide.

    The kernel prints the first 32-bit chunk only as wide as ``nbits`` needs
    and every further chunk as 8 digits; ``nbits`` defaults to the smallest
    width that holds the set.
    """
    ordered = sorted(set(ids))
    if ordered and ordered[0] < 0:
        raise ValueError(f"negative id {ordered[0]} cannot be formatted")
    if nbits is None:
        nbits = ordered[-1] + 1 if ordered else 1
    if ordered and ordered[-1] >= nbits:
        raise ValueError(f"id {ordered[-1]} does not fit in a {nbits}-bit mask")
    value = 0
    for i in ordered:
        value |= 1 << i
    chunks: List[str] = []
    first_bits = nbits % 32 or 32
    top = ((nbits + 31) // 32 - 1) * 32
    width = (first_bits + 3) // 4
    for base in range(top, -1, -32):
        chunks.append(format((value >> base) & 0xFFFFFFFF, f"0{width}x"))
        width = 8
    return ",".join(chunks)
