"""``pynumabind exec``'s usual command line, read without argparse.

``exec`` runs before every command it wraps, so what it loads is start time
for that command: argparse, with ``gettext`` and ``locale`` that its first
message loads, and building the parser cost about 4 ms of the 33 that
``exec`` added.  :func:`read` takes the lines ``exec`` is given in practice
-- full option names, each at most once, a value after its option or after
``=``, then ``--`` and the command -- and returns what argparse would.

The rule: argparse (:func:`pynumabind.cli._parser.build_parser`) is the
reference.  :func:`read` answers only for a line it reads exactly as argparse
does and returns ``None`` for any other: an abbreviated or unknown option, a
repeated one, a value that starts with ``-`` or that its option refuses (a
rank that is not an integer, a mode that is not one), ``--help``, a command
without ``--`` before it (argparse's rules for where it starts), both
``--topology`` and ``--sysfs-root``.  The caller hands such a line to
argparse, which accepts it or names what is wrong, in its own words.  Two
tests hold the rule: :data:`OPTIONS` has exactly the exec parser's options,
with their destinations, kinds, choices and defaults, and on generated
lines :func:`read` returns either ``None`` or argparse's namespace.
"""

from __future__ import annotations

import types

from ..model import CpuMode, MemoryPolicy
from ..options import FALLBACKS, ON_ERROR_CHOICES, TIERS

# typing is for type checkers only: a bind loads none of it (see pynumabind._record).
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Dict, Optional, Sequence, Set, Tuple

__all__ = ["OPTIONS", "read"]

# How an option's value is read: as argparse's action and type would.
FLAG = "flag"  # store_true: no value
COUNT = "count"  # -v, -vv: no value, counted
TEXT = "text"  # the word as given
INT = "int"  # type=int
LOWER = "lower"  # type=str.lower, then one of the choices
EXACT = "exact"  # one of the choices, as given

_MODES = tuple(mode.value for mode in CpuMode)
_POLICIES = tuple(policy.value for policy in MemoryPolicy)

#: exec's options: option string -> (destination, kind, choices, default).
OPTIONS: Dict[str, Tuple[str, str, Tuple[str, ...], Any]] = {
    "--topology": ("topology", TEXT, (), None),
    "--sysfs-root": ("sysfs_root", TEXT, (), None),
    "--allowed-cpus": ("allowed_cpus", TEXT, (), None),
    "--allowed-mems": ("allowed_mems", TEXT, (), None),
    "--no-nvml": ("no_nvml", FLAG, (), False),
    "--json": ("json", FLAG, (), False),
    "-v": ("verbose", COUNT, (), 0),
    "--verbose": ("verbose", COUNT, (), 0),
    "--rank": ("rank", INT, (), None),
    "--nprocs": ("nprocs", INT, (), None),
    "--mode": ("mode", LOWER, _MODES, None),
    "--policy": ("policy", LOWER, _POLICIES, None),
    "--nodes": ("nodes", TEXT, (), None),
    "--cpus": ("cpus", TEXT, (), None),
    "--fallback": ("fallback", LOWER, FALLBACKS, None),
    "--tiers": ("tiers", LOWER, TIERS, None),
    "--interleave-nodes": ("interleave_nodes", TEXT, (), None),
    "--weights": ("weights", TEXT, (), None),
    "--set-system-weights": ("set_system_weights", FLAG, (), False),
    "--on-error": ("on_error", EXACT, ON_ERROR_CHOICES, "raise"),
}


def read(words: Sequence[str]) -> Any:
    """argparse's namespace for ``words`` (``exec`` first), or ``None``: ask argparse.

    The namespace is a :class:`types.SimpleNamespace` with argparse's attributes.
    """
    if not words or words[0] != "exec":
        return None
    values: Dict[str, Any] = {"command": "exec"}
    values.update((dest, default) for dest, _, _, default in OPTIONS.values())
    given: Set[str] = set()
    at: Optional[int] = 1
    while at is not None and at < len(words) and words[at] != "--":
        at = _option(words, at, values, given)
    if at is None or at == len(words) or {"topology", "sysfs_root"} <= given:
        return None
    values["argv"] = list(words[at:])  # with its "--", as argparse's REMAINDER keeps it
    return types.SimpleNamespace(**values)


def _option(
    words: Sequence[str], at: int, values: Dict[str, Any], given: Set[str]
) -> Optional[int]:
    """Read the option at ``words[at]`` into ``values``: where the next one starts, or ``None``."""
    word = words[at]
    if word[1:] and word.strip("v") == "-":  # -v, -vv, ...: counted
        values["verbose"] += len(word) - 1
        return at + 1
    name, joined, value = word.partition("=")
    spec = OPTIONS.get(name)
    if spec is None or spec[0] in given or (joined and spec[1] in (FLAG, COUNT)):
        return None
    dest, kind, choices, _ = spec
    if kind == COUNT:  # --verbose
        values[dest] += 1
        return at + 1
    given.add(dest)
    if kind != FLAG and not joined:
        at += 1
        if at == len(words) or words[at].startswith("-"):
            return None
        value = words[at]
    read_value = _value(kind, choices, value)
    if read_value is None:
        return None
    values[dest] = read_value
    return at + 1


def _value(kind: str, choices: Tuple[str, ...], text: str) -> Any:
    """The option's value as argparse reads it, or ``None`` where argparse would refuse it."""
    if kind == FLAG:
        return True
    if kind == TEXT:
        return text
    if kind == INT:
        try:
            return int(text)
        except ValueError:
            return None
    value = text.lower() if kind == LOWER else text
    return value if value in choices else None
