"""The small text helpers every layer shares: ids, counts, tables, sizes, hostile values.

Values in, text out, one rule each, so that every message, every report and
the kernel-format lists write the same thing the same way:

* :func:`format_ids` writes a set of ids (``0-3,8``): messages, JSON and the
  kernel's list syntax (:func:`pynumabind.cpulist.format_cpulist`, the public
  name, passes ``empty=""``);
* :func:`counted` and :func:`named` put a noun in the right number
  (``2 ranks``, ``nodes 0-1``);
* :func:`table` is the one aligned-table format: the CLI's tables and the
  advise report's;
* :func:`human_bytes` writes a size (``123.4 GiB``);
* :func:`shown` and :func:`clipped` cut a value that came from outside
  (an environment variable, a file) short before a message quotes it;
* :func:`escaped` writes every character of untrusted text that a terminal
  or a log would act on (a line break, an ESC sequence, a lone surrogate that
  cannot even be encoded) as a visible escape: the advice record's reader
  passes every string of a record through it, so that no text taken from a
  record can forge an output line;
* :class:`Pattern` is a regular expression compiled the first time it is
  used: ``re.compile`` costs a first bind about 0.1 ms a pattern, and most
  of the package's patterns read what a bind rarely meets (an error's
  wording, a Slurm variable, an override).

It sits with the values at the top of the package, below every floor, and
imports nothing at all (not even ``typing``: the annotations are strings), so
the errors, the parsers and the bind path take it for free.
"""

from __future__ import annotations

# Not ``from typing import TYPE_CHECKING``: this module imports nothing, and
# type checkers treat any name TYPE_CHECKING as true.
TYPE_CHECKING = False

if TYPE_CHECKING:  # pragma: no cover
    import re
    from typing import AbstractSet, Any, Callable, Collection, List, Optional, Sequence

__all__ = [
    "EMPTY_IDS",
    "Pattern",
    "clipped",
    "counted",
    "escaped",
    "format_ids",
    "human_bytes",
    "named",
    "shown",
    "table",
]

#: The word a message uses for an empty set of ids.  JSON uses ``""``, the
#: kernel's own form (see :func:`pynumabind.cpulist.format_cpulist`).
EMPTY_IDS = "-"


def format_ids(ids: Optional[Collection[int]], *, empty: str = EMPTY_IDS) -> str:
    """A set of ids as text (``0-3,8``): the one place ids become text.

    The kernel's list syntax, ascending, runs of consecutive ids as ``a-b``.
    ``empty`` is what an empty set becomes: :data:`EMPTY_IDS` in messages,
    ``""`` in JSON and sysfs (``format_cpulist`` passes that).  ``None``, no
    set at all, is ``"none"`` in messages.
    """
    if ids is None:
        return "none"
    if not ids:
        return empty
    out: List[str] = []
    ordered = sorted(ids)
    start = prev = ordered[0]
    for value in ordered[1:]:
        if value == prev + 1:
            prev = value
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = value
    out.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(out)


def counted(count: int, noun: str) -> str:
    """``1 rank``, ``2 ranks``: a count with its noun in the right number."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def named(noun: str, ids: AbstractSet[int]) -> str:
    """``node 0``, ``nodes 0-1``: ids after their noun in the right number."""
    return f"{noun}{'' if len(ids) == 1 else 's'} {format_ids(ids)}"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns separated by two spaces; no trailing blanks."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    lines: List[str] = []
    for row in [list(headers), *[list(r) for r in rows]]:
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
    return "\n".join(lines)


def human_bytes(value: Optional[int]) -> str:
    """``123.4 GiB``; ``-`` when unknown."""
    if value is None:
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def clipped(text: str, width: int) -> str:
    """``text``, or its first ``width - 3`` characters and ``...``: at most ``width``."""
    return text if len(text) <= width else text[: width - 3] + "..."


def shown(value: str) -> str:
    """``repr`` of a variable's value, cut short: values can be hostile."""
    return repr(value) if len(value) <= 60 else repr(value[:57]) + "..."


def escaped(text: str) -> str:
    """``text`` with each character that is not printable written as its Python escape.

    ``"ok\\n\\x1b[2J"`` becomes ``"ok\\\\n\\\\x1b[2J"``: a line break, a tab, an
    ESC, any other control or format character (bidirectional overrides
    included), a line separator and a lone surrogate are all shown as
    ``\\n``, ``\\t``, ``\\x1b``, ``\\u202e``, ``\\ud800`` (``str.isprintable``
    decides; a plain space stays).  Nothing else changes, backslashes
    included, so escaping twice changes nothing more and printable text is
    returned as it is.  No quotes are added and nothing is cut short (the
    reader bounds the length).
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class Pattern:
    """A regular expression compiled on first use; its methods are the compiled one's.

    Made as ``Pattern(re.compile, source)``: the module that holds one has
    imported ``re`` and hands over its ``compile``, so using the pattern
    never imports a module (which a fork could catch half done), and this
    module stays free of imports.  ``re.compile`` runs only when something
    is matched.  Compiling twice from two threads at once is harmless: the
    same pattern results.
    """

    __slots__ = ("_compile", "_compiled", "flags", "source")

    def __init__(
        self, compile: Callable[[str, int], re.Pattern[str]], source: str, flags: int = 0
    ) -> None:
        self._compile = compile
        self.source = source
        self.flags = flags
        self._compiled: Optional[re.Pattern[str]] = None

    def compiled(self) -> re.Pattern[str]:
        """The compiled pattern (compiled now, the first time)."""
        pattern = self._compiled
        if pattern is None:
            pattern = self._compiled = self._compile(self.source, self.flags)
        return pattern

    def __getattr__(self, name: str) -> Any:
        return getattr(self.compiled(), name)
