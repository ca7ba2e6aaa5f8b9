"""The per-rank overrides ``nodes`` and ``cpus``: one parser for both.

Both overrides give every local rank a set of ids, written as a string of
per-rank items or as a sequence of items.  They differ only in the details
a :class:`_Kind` records:

* ``nodes``: a string, ranks separated by ``;`` when the string contains one
  (``"0-1;2-3"``: each item a node list), else by ``,`` (``"0,0,1,1"``: the
  vLLM form, one node per rank); or a sequence whose items are an ``int``, a
  node-list string or a set of ints.
* ``cpus``: a string with ranks separated by ``;`` (``"0-7;8-15"``: each item
  a cpulist, ``+`` and ``!`` and ``all`` as in numactl); or a sequence whose
  items are cpulist strings or sets of ints.

A string with neither ``;`` nor ``,`` may also separate ranks by ASCII
whitespace, vLLM's form (``"1 1 0 0"``, ``"0-7 8-15"``): one reading, since
an item holds no space then.  ``|`` is rejected, so a string never has two
readings.

This is the one reader of both overrides, wherever they come from: keyword
arguments, ``PYNUMABIND_NODES``/``PYNUMABIND_CPUS`` (through
:mod:`pynumabind.discovery._environ`, in the core and in the framework hooks alike),
and the CLI's ``--nodes``/``--cpus``.  One rule for spaces: only ASCII
whitespace separates or is trimmed (:data:`ASCII_SPACE`); any other
character, U+00A0 and ``\x1f`` included, is part of an item, so ``'0\xa0,1'``
is a ConfigError for nodes as for CPUs.  Only the syntax is checked here;
the planner checks the ids exist on the machine.
"""

from __future__ import annotations

import re
from typing import AbstractSet, Callable, Iterable, List, Optional, Sequence, Tuple, Union

from .._record import record
from .._text import Pattern
from ..cpulist import parse_cpulist, parse_nodelist
from ..errors import ConfigError, ListParseError
from ..options import ASCII_SPACE

__all__ = [
    "ASCII_SPACE",
    "RANK_SEPARATOR",
    "CpusOverride",
    "NodesOverride",
    "int_set",
    "parse_cpus_override",
    "parse_nodes_override",
]

RANK_SEPARATOR = ";"

NodesOverride = Union[str, Sequence[Union[int, str, AbstractSet[int]]]]
CpusOverride = Union[str, Sequence[Union[str, AbstractSet[int]]]]


@record(frozen=True)
class _Kind:
    """What tells the two overrides apart."""

    name: str  # "nodes" or "cpus", as in messages
    noun: str  # one id: "node" or "CPU"
    comma_separates_ranks: bool  # "0,0,1,1" is one node per rank
    accepts_int: bool  # a bare int item is one id
    items: str  # what a sequence item may be, for the error

    def __init__(
        self, name: str, noun: str, comma_separates_ranks: bool, accepts_int: bool, items: str
    ) -> None:
        self.__dict__.update(
            name=name,
            noun=noun,
            comma_separates_ranks=comma_separates_ranks,
            accepts_int=accepts_int,
            items=items,
        )


_NODES = _Kind("nodes", "node", True, True, "a node id, node list or set of node ids")
_CPUS = _Kind("cpus", "CPU", False, False, "a cpulist string or a set of CPU ids")


def int_set(value: Iterable[object], what: str, index: int) -> frozenset[int]:
    """Non-negative int ids (bools refused), else a ConfigError naming entry ``index``."""
    out = set()
    for item in value:
        if not isinstance(item, int) or isinstance(item, bool) or item < 0:
            raise ConfigError(f"{what} override entry {index}: {item!r} is not a non-negative id")
        out.add(item)
    return frozenset(out)


_WORD = Pattern(re.compile, f"[^{re.escape(ASCII_SPACE)}]+")


def _split_ranks(text: str, what: str, separator: str) -> List[Tuple[str, int]]:
    """Split an override string into (item, position) pairs at ``separator``.

    ``separator`` ``" "``: at runs of ASCII whitespace (vLLM's form).
    """
    if "|" in text:
        raise ConfigError(
            f"{what} override {text!r}: separate ranks with {RANK_SEPARATOR!r}, not '|'"
        )
    if separator == " ":
        return [(m.group(), m.start()) for m in _WORD.finditer(text)]
    items: List[Tuple[str, int]] = []
    position = 0
    for raw in text.split(separator):
        stripped = raw.strip(ASCII_SPACE)
        if not stripped:
            raise ConfigError(
                f"{what} override {text!r}: empty entry for rank {len(items)} "
                f"at position {position}"
            )
        items.append((stripped, position + len(raw) - len(raw.lstrip(ASCII_SPACE))))
        position += len(raw) + 1
    return items


def _separator(kind: _Kind, value: str) -> str:
    """What separates ranks in ``value``: ``;``, else ``,`` for nodes, else ASCII whitespace."""
    if RANK_SEPARATOR in value:
        return RANK_SEPARATOR
    if "," in value:
        return "," if kind.comma_separates_ranks else RANK_SEPARATOR
    return " "


def _parse_text(
    kind: _Kind, value: str, parse: Callable[[str], frozenset[int]]
) -> List[frozenset[int]]:
    entries = []
    for index, (text, position) in enumerate(
        _split_ranks(value, kind.name, _separator(kind, value))
    ):
        try:
            entries.append(parse(text))
        except ListParseError as exc:
            raise ConfigError(
                f"{kind.name} override {value!r}: entry for rank {index} at position "
                f"{position}: {exc}"
            ) from exc
    return entries


def _parse_item(
    kind: _Kind, item: object, index: int, parse: Callable[[str], frozenset[int]]
) -> frozenset[int]:
    if kind.accepts_int and isinstance(item, int) and not isinstance(item, bool):
        return int_set([item], kind.name, index)
    if isinstance(item, str):
        try:
            return parse(item)
        except ListParseError as exc:
            raise ConfigError(f"{kind.name} override entry {index}: {exc}") from exc
    if isinstance(item, AbstractSet):
        return int_set(item, kind.name, index)
    raise ConfigError(f"{kind.name} override entry {index}: {item!r} is not {kind.items}")


def _parse(
    kind: _Kind, value: object, parse: Callable[[str], frozenset[int]]
) -> Tuple[frozenset[int], ...]:
    if isinstance(value, str):
        entries = _parse_text(kind, value, parse)
    elif isinstance(value, (bytes, bytearray)) or not isinstance(value, Sequence):
        raise ConfigError(
            f"{kind.name} override must be a string or a sequence, not {type(value).__name__}"
        )
    else:
        entries = [_parse_item(kind, item, index, parse) for index, item in enumerate(value)]
    # An override must name at least one rank, and each rank at least one id.
    for index, entry in enumerate(entries):
        if not entry:
            raise ConfigError(f"{kind.name} override entry {index} names no {kind.noun}")
    if not entries:
        raise ConfigError(f"{kind.name} override is empty")
    return tuple(entries)


def parse_nodes_override(
    value: NodesOverride, *, universe: Optional[AbstractSet[int]] = None
) -> Tuple[frozenset[int], ...]:
    """Per-rank node sets from a ``nodes`` override (see the module docstring).

    ``universe`` (the machine's node ids) enables ``all`` and ``!`` in items.
    """
    return _parse(_NODES, value, lambda text: parse_nodelist(text, universe=universe))


def parse_cpus_override(
    value: CpusOverride,
    *,
    universe: Optional[AbstractSet[int]] = None,
    allowed: Optional[AbstractSet[int]] = None,
) -> Tuple[frozenset[int], ...]:
    """Per-rank CPU sets from a ``cpus`` override (see the module docstring).

    ``universe`` (online CPUs) enables ``all``/``!``; ``allowed`` enables
    ``+`` (indices into the allowed CPUs), as in numactl.
    """
    return _parse(
        _CPUS, value, lambda text: parse_cpulist(text, universe=universe, allowed=allowed)
    )
