"""Parsers and formatters for CPU lists, node lists and hex cpumasks.

Pure functions, no I/O.  Three text formats reach the library:

* the Linux *cpulist* that sysfs prints and users type (``0-3,8-11``),
  including the kernel's group form ``first-last:used/group`` (from each
  ``group`` ids starting at ``first``, the first ``used``; ``0-7:2/4`` is
  ``0,1,4,5``);
* numactl-style lists so users can reuse their numactl strings: ``all``,
  a leading ``!`` (complement within ``universe=``, the machine's CPUs or
  nodes) and a leading ``+`` (indices into ``allowed=``, this process's
  CPUs or nodes: ``+0-1`` is its first two).  Without the reference set
  these raise, because no answer would be right;
* hex *cpumasks*, as the kernel prints them (comma-separated 32-bit words,
  most significant first: ``Cpus_allowed``, sysfs ``cpumap``/``local_cpus``)
  and as NVML returns them (64-bit integers, least significant first).

Grammar of a list: ``ws* ['!'] ['+'] body ws*`` where ``body`` is ``all``
or comma-separated items ``N``, ``N-M`` or ``N-M:U/G``, each item with
optional whitespace (space, tab, newline, VT, FF, CR: C's ``isspace``, not
Unicode's) around it.  Numbers are ASCII decimal; leading zeros are
decimal (``010`` is 10), as in the kernel.  An empty (or blank) string is
the empty set.

Bad input raises :class:`~pynumabind.errors.ListParseError` (a
``ValueError``) naming the offending token and its position, whatever the
input's type.  Work and memory are O(len(text) + max_id): numbers are
length-checked before conversion, ids are bounded by ``max_id`` (default
65535) before any set is built, the ranges a group form expands to are
limited to ``2 * (max_id + 1)`` in all, and pending ranges are merged as
they accumulate.

Deliberate differences from the kernel's ``bitmap_parselist``: we reject
empty items (``0,,1``, ``,0``, ``0,``) and whitespace used as a separator
(``0 1``), which the kernel skips; we do not support its ``N`` (last bit)
token or ``all:U/G``; ``all`` is lower case and means ``universe``.
``N:U/G`` without a range is an error in both.  Masks are read as the
kernel prints them (plus an optional ``0x`` and surrounding whitespace);
its ``bitmap_parse`` also skips empty chunks and inner whitespace, which we
reject.

Deliberate differences from libnuma 2.0.16's ``numa_parse_cpustring_all``
and ``numa_parse_nodestring_all`` (which read numbers with ``strtoul(s,
&end, 0)``; each is pinned by a test in ``tests/values/test_cpulist_against_libnuma.py``):

* libnuma reads ``010`` as octal 8 (``08`` is an error) and ``0x1`` as hex;
  we read decimal, as the kernel and sysfs do;
* libnuma accepts a sign before any number (``-0`` is 0, ``0,+1`` is
  ``{0, 1}``, ``0--0`` is ``{0}``); we reject signs;
* libnuma accepts whitespace before any number (``0-\\t1``) but none after
  (``0 ``, ``0\\n``); we accept it around items and the whole string
  (sysfs files end in a newline) but not inside an item;
* libnuma turns a descending range ``1-0`` into ``{1}``; we reject it;
* libnuma accepts ``all`` as the last item (``0,all``); we only alone;
* libnuma truncates ids to 32 bits (``4294967296`` is CPU 0, and a range
  ending there loops ~2**32 times); we reject ids above ``max_id``;
* libnuma rejects the group form; we accept it, as the kernel does;
* libnuma rejects ids that are not possible on this machine; we only
  bound them by ``max_id`` and leave checking them against the topology to
  the caller, which can say which CPUs or nodes exist;
* ``!`` in libnuma complements within ``0 .. configured - 1``; ours within
  ``universe``.
"""

from __future__ import annotations

import collections.abc as _abc
import itertools
import operator
import re
import reprlib

from ._text import Pattern, clipped, format_ids
from .errors import ListParseError

# typing is for type checkers only: a bind loads none of it (see pynumabind._record).
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import AbstractSet, Iterable, List, Optional, Sequence, Tuple, Union

__all__ = [
    "format_cpulist",
    "format_cpumask",
    "parse_cpulist",
    "parse_cpumask",
    "parse_nodelist",
]

DEFAULT_MAX_ID = 65535

# C isspace() in the C locale: what the kernel and libnuma skip.  str.strip()
# without arguments would also strip Unicode spaces such as U+0085 and U+00A0.
_WHITESPACE = " \t\n\v\f\r"

# [0-9], not \d: \d and int() also accept non-ASCII digits such as U+0663.
_ITEM = Pattern(re.compile, r"([0-9]+)(?:-([0-9]+)(?::([0-9]+)/([0-9]+))?)?")
# One item, with the whitespace around it and the comma after it (group 5).
_ITEM_AT = Pattern(
    re.compile, r"[ \t\n\v\f\r]*([0-9]+)(?:-([0-9]+)(?::([0-9]+)/([0-9]+))?)?[ \t\n\v\f\r]*(,|\Z)"
)
_SINGLE_WITH_GROUP = Pattern(re.compile, r"[0-9]+:")
_HEX_WORD = Pattern(re.compile, r"[0-9a-fA-F]{1,8}")

# Kernel group parameters are unsigned int; larger ones overflow there too.
_GROUP_LIMIT = 2**32 - 1
# Runs collected beyond twice the last merged count before merging again.
_MERGE_SLACK = 4096
# Longest token quoted in an error, so a 1 MB item gives a short message.
_TOKEN_CHARS = 64
# Zero words a mask may carry beyond max_id (Mems_allowed is 1024 bits wide
# even on a one-node machine).
_MASK_SLACK_BITS = 2048

if TYPE_CHECKING:  # pragma: no cover
    Interval = Tuple[int, int]

_REPR = reprlib.Repr()
_REPR.maxlevel = 2
_REPR.maxother = _REPR.maxstring = _REPR.maxlong = _TOKEN_CHARS


def _token(text: str) -> str:
    return clipped(text, _TOKEN_CHARS)


def _fail(message: str, text: str, token: str, position: int) -> ListParseError:
    return ListParseError(message, text=text, token=_token(token), position=position)


def _check_max_id(max_id: int) -> None:
    if not isinstance(max_id, int) or isinstance(max_id, bool) or max_id < 0:
        raise ValueError(f"max_id must be a non-negative int, not {max_id!r}")


def _short_repr(value: object) -> str:
    """repr() of ``value`` cut to a token's length, without building a huge one first."""
    if isinstance(value, (bytes, bytearray, memoryview, str)):
        value = value[:_TOKEN_CHARS]
    return _token(_REPR.repr(value))


def _wrong_type(value: object, expected: str) -> ListParseError:
    shown = _short_repr(value)
    return ListParseError(
        f"expected {expected}, not {type(value).__name__}", text=shown, token=shown, position=0
    )


def _number(text: str, start: int, end: int, limit: int) -> int:
    """Value of the ASCII digits ``text[start:end]``, or ``limit + 1`` when larger."""
    return _value(text[start:end], limit)


def _value(digits: str, limit: int) -> int:
    """Value of ASCII ``digits``, or ``limit + 1`` when larger.

    Leading zeros are dropped and the length checked first, so a megabyte of
    digits costs one scan and never reaches int().
    """
    digits = digits.lstrip("0")
    if len(digits) > len(str(limit)):
        return limit + 1
    return int(digits) if digits else 0


def _merge(intervals: List[Interval]) -> List[Interval]:
    """Sort and coalesce inclusive intervals (touching ones too)."""
    merged: List[Interval] = []
    for lo, hi in sorted(intervals):
        if merged and lo <= merged[-1][1] + 1:
            if hi > merged[-1][1]:
                merged[-1] = (merged[-1][0], hi)
        else:
            merged.append((lo, hi))
    return merged


def _expand(runs: List[Interval]) -> List[int]:
    """The ids of ``runs`` (``(first, last)`` pairs), merged: sorted and unique."""
    return list(itertools.chain.from_iterable(range(lo, hi + 1) for lo, hi in _merge(runs)))


def _item_error(
    text: str,
    start: int,
    stop: int,
    limit: int,
    limit_message: str,
    *,
    over_budget: bool = False,
) -> ListParseError:
    """Why the item in ``text[start:stop]`` was rejected (the slow path, run once).

    It re-parses the item on its own, so a disagreement with the fast path
    surfaces as an AssertionError instead of a wrong message.
    """
    raw = text[start:stop]
    core = raw.strip(_WHITESPACE)
    at = start + len(raw) - len(raw.lstrip(_WHITESPACE))
    match = _ITEM.fullmatch(core)
    if match is None:
        return _fail(_malformed(core), text, core, at)
    failure = _range_error(text, core, at, match, limit=limit, limit_message=limit_message)
    if failure is None:
        failure = _group_error(text, core, at, match)
    if failure is not None:
        return failure
    if over_budget:
        return _fail(
            f"group forms expand to more than {_group_budget(limit)} ranges in all",
            text,
            core,
            at,
        )
    raise AssertionError(f"item {_token(core)!r} was rejected for no reason")  # pragma: no cover


def _malformed(core: str) -> str:
    """Why an item that does not even match the item grammar was rejected."""
    if not core:
        return "empty item"
    if core[0] == "-":
        return "negative id"
    if core[0] == "+":
        return "signed id"
    if _SINGLE_WITH_GROUP.match(core):
        return "group form needs a range (N-M:used/group), as in the kernel"
    return "malformed item (want N, N-M or N-M:used/group)"


def _range_error(
    text: str, core: str, at: int, match: re.Match[str], *, limit: int, limit_message: str
) -> Optional[ListParseError]:
    """An id over ``limit`` or a descending range in a well-formed item, else None."""
    first = _number(core, match.start(1), match.end(1), limit)
    if first > limit:
        return _fail(limit_message, text, match.group(1), at)
    if match.group(2) is None:
        return None
    last = _number(core, match.start(2), match.end(2), limit)
    if last > limit:
        return _fail(limit_message, text, match.group(2), at + match.start(2))
    if last < first:
        return _fail("descending range", text, core, at)
    return None


def _group_error(text: str, core: str, at: int, match: re.Match[str]) -> Optional[ListParseError]:
    """A group form (``:used/group``) that overflows or is inconsistent, else None."""
    if match.group(3) is None:
        return None
    used = _number(core, match.start(3), match.end(3), _GROUP_LIMIT)
    group = _number(core, match.start(4), match.end(4), _GROUP_LIMIT)
    if used > _GROUP_LIMIT or group > _GROUP_LIMIT:
        return _fail("group size overflows 32 bits", text, core, at)
    if group == 0 or used > group:
        return _fail(
            "bad group form (want used/group with group > 0 and used <= group)",
            text,
            core,
            at,
        )
    return None


def _group_budget(limit: int) -> int:
    """Ranges all group forms of one list may expand to: twice the most a set has."""
    return 2 * (limit + 1)


def _parse_items(
    text: str,
    start: int,
    end: int,
    *,
    limit: int,
    limit_message: str,
) -> List[int]:
    """Ids of the comma-separated items in ``text[start:end]`` (sorted, unique).

    Every id must be ``<= limit``; ``limit_message`` says why when one is not.
    Runs are collected as (first, last) pairs and merged whenever the list has
    doubled since the last merge: a merged list holds at most
    ``(limit + 2) // 2`` runs, so memory stays O(limit) for any input length
    and time O(n log n).  Group forms are the one way a short item makes many
    runs, so together they may make at most :func:`_group_budget` of them.
    Any item the fast path does not accept goes to :func:`_item_error`.
    """
    runs: List[Interval] = []
    merge_at = _MERGE_SLACK
    budget = _group_budget(limit)
    digits = len(str(limit))
    match_item = _ITEM_AT.match
    pos = start
    while True:
        match = match_item(text, pos, end)
        if match is None:
            comma = text.find(",", pos, end)
            raise _item_error(text, pos, end if comma < 0 else comma, limit, limit_message)
        first, last = _bounds(match, digits, limit)
        if last > limit or first > last:
            raise _item_error(text, pos, match.start(5), limit, limit_message)
        if match.group(3) is None:
            runs.append((first, last))
        else:
            budget = _add_group_runs(runs, match, first, last, budget)
            if budget < 0:
                over = budget == _BAD_GROUP
                raise _item_error(
                    text, pos, match.start(5), limit, limit_message, over_budget=not over
                )
        if len(runs) > merge_at:
            runs = _merge(runs)
            merge_at = 2 * len(runs) + _MERGE_SLACK
        if match.group(5) != ",":
            break
        pos = match.end()
    return _expand(runs)


#: What a plain list is made of (:func:`_plain_items`).
_PLAIN_CHARS = "0123456789,-"


def _plain_items(body: str, limit: int) -> Optional[List[int]]:
    """The ids of a plain list (``0-3,8-11``, as sysfs writes them), else None.

    The fast path of every kernel-written list: ASCII digits, ``-`` and
    ``,`` only, each item an id or an ascending range within ``limit``,
    and no more items than one merge holds (:data:`_MERGE_SLACK`).  Anything
    else -- a group form, whitespace inside, an error of any kind -- is None,
    and :func:`_parse_items` parses it (and words the error), so the two
    agree on every list this one accepts (a property test holds them to it).
    No regular expression is compiled for a plain list.
    """
    if body.strip(_PLAIN_CHARS) or not body.isascii():
        return None
    items = body.split(",")
    if len(items) > _MERGE_SLACK:
        return None
    digits = len(str(limit))
    runs: List[Interval] = []
    for item in items:
        first_text, dash, last_text = item.partition("-")
        if not last_text:
            last_text = first_text
            if dash:
                return None
        if (
            not first_text.isdigit()
            or not last_text.isdigit()
            or len(first_text) > digits
            or len(last_text) > digits
        ):
            return None
        first, last = int(first_text), int(last_text)
        if first > last or last > limit:
            return None
        runs.append((first, last))
    return _expand(runs)


def _bounds(match: re.Match[str], digits: int, limit: int) -> Interval:
    """An item's first and last id (``last == first`` for a single id).

    int() runs only on short digit strings (a megabyte of digits would be
    slow); longer ones go through :func:`_value`, which caps them.
    """
    first_text, last_text = match.group(1, 2)
    first = int(first_text) if len(first_text) <= digits else _value(first_text, limit)
    if last_text is None:
        return first, first
    last = int(last_text) if len(last_text) <= digits else _value(last_text, limit)
    return first, last


#: What :func:`_add_group_runs` returns for an inconsistent group form.
_BAD_GROUP = -(2**62)


def _add_group_runs(
    runs: List[Interval], match: re.Match[str], first: int, last: int, budget: int
) -> int:
    """Append the runs of a ``first-last:used/group`` item; return the budget left.

    A negative result means the item was not added: :data:`_BAD_GROUP` for an
    inconsistent group form, any other negative number for one that would
    exceed the list's group budget.
    """
    used_text, group_text = match.group(3, 4)
    used = int(used_text) if len(used_text) <= 10 else _value(used_text, _GROUP_LIMIT)
    group = int(group_text) if len(group_text) <= 10 else _value(group_text, _GROUP_LIMIT)
    if group > _GROUP_LIMIT or group == 0 or used > group:
        return _BAD_GROUP
    if used == group:
        runs.append((first, last))
    elif used:
        budget -= (last - first) // group + 1
        if budget < 0:
            return budget
        runs.extend((lo, min(lo + used - 1, last)) for lo in range(first, last + 1, group))
    return budget


def _parse_list(
    text: str,
    kind: str,
    universe: Optional[AbstractSet[int]],
    allowed: Optional[AbstractSet[int]],
    max_id: int,
) -> frozenset[int]:
    if not isinstance(text, str):
        raise _wrong_type(text, f"a {kind} list as str")
    _check_max_id(max_id)
    start = len(text) - len(text.lstrip(_WHITESPACE))
    end = len(text.rstrip(_WHITESPACE))
    if start >= end:
        return frozenset()
    invert = text[start] == "!"
    if invert:
        if universe is None:
            raise _fail(f"'!' needs the machine's {kind}s (universe=)", text, "!", start)
        start += 1
    relative = start < end and text[start] == "+"
    if relative:
        if allowed is None:
            raise _fail(f"'+' needs the allowed {kind}s (allowed=)", text, "+", start)
        start += 1
    if text[start:end].strip(_WHITESPACE) == "all":
        ids = _all_ids(
            text, start, end, kind=kind, universe=universe, allowed=allowed if relative else None
        )
    elif relative:
        assert allowed is not None
        ids = _relative_ids(text, start, end, kind=kind, allowed=allowed, max_id=max_id)
    else:
        plain = _plain_items(text[start:end], max_id)
        if plain is None:
            message = f"id exceeds the maximum {max_id}"
            plain = _parse_items(text, start, end, limit=max_id, limit_message=message)
        ids = frozenset(plain)
    if invert:
        assert universe is not None
        ids = frozenset(universe) - ids
    return ids


def _all_ids(
    text: str,
    start: int,
    end: int,
    *,
    kind: str,
    universe: Optional[AbstractSet[int]],
    allowed: Optional[AbstractSet[int]],
) -> frozenset[int]:
    """``all`` (every id of the machine) or ``+all`` (every allowed id; ``allowed`` given)."""
    if allowed is not None:
        return frozenset(allowed)
    if universe is None:
        at = start + text[start:end].index("all")
        raise _fail(f"'all' needs the machine's {kind}s (universe=)", text, "all", at)
    return frozenset(universe)


def _relative_ids(
    text: str, start: int, end: int, *, kind: str, allowed: AbstractSet[int], max_id: int
) -> frozenset[int]:
    """``+LIST``: indices into the sorted allowed ids."""
    ordered = sorted(allowed)
    limit = min(max_id, len(ordered) - 1)
    if len(ordered) - 1 <= max_id:
        message = f"relative index beyond the {len(ordered)} allowed {kind}s"
    else:
        message = f"relative index exceeds the maximum {max_id}"
    indices = _parse_items(text, start, end, limit=limit, limit_message=message)
    return frozenset(ordered[i] for i in indices)


def parse_cpulist(
    text: str,
    *,
    universe: Optional[AbstractSet[int]] = None,
    allowed: Optional[AbstractSet[int]] = None,
    max_id: int = DEFAULT_MAX_ID,
) -> frozenset[int]:
    """Parse a cpulist (``0-3,8-11``, ``0-31:4/8``) or numactl-style CPU string.

    ``universe`` (all of the machine's CPUs) enables ``all`` and ``!``;
    ``allowed`` (this process's CPUs) enables ``+`` (indices into it, in
    ascending order).  Ids are not checked against ``universe``: the caller
    knows the topology and can name the CPUs that do exist.

    Args:
        text: The list.
        universe: All of the machine's CPUs (for ``all`` and ``!``).
        allowed: This process's CPUs (for ``+``).
        max_id: The largest id accepted.

    Returns:
        The CPU ids, as a frozenset (empty for ``""``).

    Raises:
        ListParseError: ``text`` is not a list, names an id above ``max_id``,
            or uses ``all``/``!`` without ``universe`` or ``+`` without
            ``allowed``; the message gives the item and its position.
        ValueError: ``max_id`` is not a non-negative int.
    """
    return _parse_list(text, "CPU", universe, allowed, max_id)


def parse_nodelist(
    text: str,
    *,
    universe: Optional[AbstractSet[int]] = None,
    allowed: Optional[AbstractSet[int]] = None,
    max_id: int = DEFAULT_MAX_ID,
) -> frozenset[int]:
    """Parse a node list; same grammar as :func:`parse_cpulist`.

    Args:
        text: The list.
        universe: All of the machine's nodes (for ``all`` and ``!``).
        allowed: This process's memory nodes (for ``+``).
        max_id: The largest id accepted.

    Returns:
        The node ids, as a frozenset.

    Raises:
        ListParseError: as :func:`parse_cpulist`, naming nodes.
        ValueError: ``max_id`` is not a non-negative int.
    """
    return _parse_list(text, "node", universe, allowed, max_id)


def _checked_ids(ids: Iterable[int]) -> List[int]:
    """Sorted unique ids; ValueError for anything but non-negative ints."""
    out = set()
    for value in ids:
        if isinstance(value, bool):
            raise ValueError(f"id {value!r} is not an integer")
        try:
            number = operator.index(value)
        except TypeError:
            raise ValueError(f"id {value!r} is not an integer") from None
        if number < 0:
            raise ValueError(f"negative id {number} cannot be formatted")
        out.add(number)
    return sorted(out)


def format_cpulist(ids: Iterable[int]) -> str:
    """Canonical cpulist, byte-identical to the kernel's ``%*pbl`` (no newline).

    The JSON form of a set of ids: an empty set is ``""``, as the kernel
    writes it.  The text itself comes from :func:`~pynumabind._text.format_ids`,
    the one formatter; this adds the check that every id is a non-negative int.

    Args:
        ids: The ids, in any order, duplicates allowed.

    Returns:
        The list, ranges collapsed -- ``{0, 1, 2, 3, 8, 9}`` is ``"0-3,8-9"``.

    Raises:
        ValueError: an id is not an int (a bool is not one) or is negative.
    """
    return format_ids(_checked_ids(ids), empty="")


def set_bits(value: int, base: int, out: List[int]) -> None:
    """Append ``base + b`` for every set bit ``b`` of ``value``, ascending.

    Not public (not in ``__all__``): the one loop over a mask's bits, for the
    mask parsers here and the kernel's node masks (:mod:`pynumabind._os.libnuma`).
    """
    while value:
        low = value & -value
        out.append(base + low.bit_length() - 1)
        value ^= low


def _parse_mask_text(text: str, max_id: int) -> frozenset[int]:
    start = len(text) - len(text.lstrip(_WHITESPACE))
    end = len(text.rstrip(_WHITESPACE))
    if start >= end:
        return frozenset()
    if text[start : start + 2] in ("0x", "0X"):
        start += 2
    words = text.count(",", start, end) + 1
    if 32 * (words - 1) > max_id + 1 + _MASK_SLACK_BITS:
        raise _fail(
            f"mask of {words} words is wider than ids up to {max_id} need",
            text,
            text[start : start + 8],
            start,
        )
    out: List[int] = []
    pos = start
    for index in range(words):
        comma = text.find(",", pos, end)
        word_end = end if comma < 0 else comma
        if _HEX_WORD.fullmatch(text, pos, word_end) is None:
            what = "empty mask word" if pos == word_end else "malformed mask word"
            raise _fail(f"{what} (want 1-8 hex digits)", text, text[pos:word_end], pos)
        value = int(text[pos:word_end], 16)
        if value:
            base = 32 * (words - 1 - index)
            if base + value.bit_length() - 1 > max_id:
                raise _fail(
                    f"id {base + value.bit_length() - 1} exceeds the maximum {max_id}",
                    text,
                    text[pos:word_end],
                    pos,
                )
            set_bits(value, base, out)
        pos = word_end + 1
    return frozenset(out)


def _parse_mask_words(words: object, max_id: int, word_bits: int) -> frozenset[int]:
    # bytes iterate as small ints and sets or mappings have no word order:
    # reading any of them as NVML words would give a silently wrong set.
    if isinstance(words, (bytes, bytearray, memoryview, _abc.Set, _abc.Mapping)):
        raise _wrong_type(words, "a cpumask as str or as a sequence of int words")
    try:
        # iter(), not isinstance(Iterable): pynvml's nvmlDeviceGetCpuAffinity
        # returns a ctypes array, which iterates by the sequence protocol only.
        iterator = iter(words)  # type: ignore[call-overload]
    except TypeError:
        raise _wrong_type(words, "a cpumask as str or as a sequence of int words") from None
    out: List[int] = []
    for index, word in enumerate(iterator):
        if word_bits * index > max_id + 1 + _MASK_SLACK_BITS:
            raise ListParseError(
                f"mask of more than {index} words is wider than ids up to {max_id} need",
                text=_short_repr(words),
                token=_short_repr(word),
                position=index,
            )
        value = -1
        if not isinstance(word, bool):
            try:
                value = operator.index(word)
            except TypeError:
                pass
        if value < 0 or value >> word_bits:
            raise ListParseError(
                f"mask word is not an unsigned {word_bits}-bit integer",
                text=_short_repr(words),
                token=_short_repr(word),
                position=index,
            )
        if value:
            base = word_bits * index
            if base + value.bit_length() - 1 > max_id:
                raise ListParseError(
                    f"id {base + value.bit_length() - 1} exceeds the maximum {max_id}",
                    text=_short_repr(words),
                    token=_short_repr(word),
                    position=index,
                )
            set_bits(value, base, out)
    return frozenset(out)


def parse_cpumask(
    mask: Union[str, Sequence[int]], *, max_id: int = DEFAULT_MAX_ID, word_bits: int = 64
) -> frozenset[int]:
    """Parse a hex cpumask.

    A string is the kernel's form: comma-separated 32-bit hex words, most
    significant first (``/proc/self/status`` Cpus_allowed, sysfs
    ``local_cpus``), optionally after ``0x``; blank is the empty set.  A
    sequence of integers is NVML's form: ``word_bits``-bit words, least
    significant first.  For a sequence, ``position`` in an error is the
    index of the offending word.
    """
    _check_max_id(max_id)
    if not isinstance(word_bits, int) or isinstance(word_bits, bool) or word_bits <= 0:
        raise ValueError(f"word_bits must be a positive int, not {word_bits!r}")
    if isinstance(mask, str):
        return _parse_mask_text(mask, max_id)
    return _parse_mask_words(mask, max_id, word_bits)


def format_cpumask(ids: Iterable[int], nbits: Optional[int] = None) -> str:
    """Kernel-style hex mask (``%*pb``) of a bitmap ``nbits`` wide (no newline).

    The kernel prints the most significant 32-bit chunk only as many hex
    digits wide as ``nbits % 32`` needs, every further chunk as 8 digits,
    lower case; ``nbits`` is ``nr_cpu_ids`` for cpumaps and MAX_NUMNODES for
    ``Mems_allowed``.  It defaults to the smallest width that holds the set.
    """
    ordered = _checked_ids(ids)
    if nbits is None:
        nbits = ordered[-1] + 1 if ordered else 1
    elif not isinstance(nbits, int) or isinstance(nbits, bool) or nbits < 0:
        raise ValueError(f"nbits must be a non-negative int, not {nbits!r}")
    if ordered and ordered[-1] >= nbits:
        raise ValueError(f"id {ordered[-1]} does not fit in a {nbits}-bit mask")
    chunks = (nbits + 31) // 32
    if not chunks:
        return ""
    raw = bytearray(4 * chunks)
    for i in ordered:
        raw[i >> 3] |= 1 << (i & 7)
    first_width = ((nbits % 32 or 32) + 3) // 4
    total = first_width + 8 * (chunks - 1)
    digits = format(int.from_bytes(raw, "little"), "x").rjust(total, "0")
    return ",".join(
        [digits[:first_width], *(digits[k : k + 8] for k in range(first_width, total, 8))]
    )
