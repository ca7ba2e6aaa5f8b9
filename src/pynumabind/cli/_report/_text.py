"""The report as text, readable at :data:`WIDTH` columns (pure).

First what a reader needs to act on -- the result, where to send the file,
every cross-check with its verdict -- then each section under its title, in
the order of :data:`~._document.SECTIONS`.  A section that failed says why
(and where, from its traceback); one that was skipped says why.  Prose lines
longer than :data:`WIDTH` wrap with a hanging indent; a table wider than
that is written one row per line instead (:func:`fit_table`).
"""

from __future__ import annotations

import re
from typing import List, Optional, Sequence

from ..._text import counted, table
from ._document import DISAGREE, FAILED, NOT_APPLICABLE, SKIPPED, Check, Report

__all__ = ["ISSUES", "WIDTH", "fit_table", "render", "summary", "wrap"]

#: The widest line the text report writes (tables that cannot fit excepted: none).
WIDTH = 100

#: Where reports go (``pyproject.toml``'s ``[project.urls] Issues``).
ISSUES = "https://github.com/pynumabind/pynumabind/issues"

_LABELS = {"agree": "agree", DISAGREE: "DISAGREE", NOT_APPLICABLE: "n/a"}
_INDENT = re.compile(r"\A( *(?:- |\w[\w ]*: )?)")


def wrap(line: str, width: int = WIDTH, indent: Optional[int] = None) -> List[str]:
    """``line`` cut at blanks into lines of at most ``width``, continued under its text.

    The continuation is indented by ``indent``, by default past the line's
    own indent and a leading ``- `` or ``label: ``; a word longer than the
    room left (a long path) is cut where the line ends.
    """
    if len(line) <= width:
        return [line]
    if indent is None:
        lead = _INDENT.match(line)
        indent = len(lead.group(1)) if lead else 0
    margin = " " * min(indent, width // 2)
    out: List[str] = []
    current = ""
    for word in re.split(r"(?<=\S) (?=\S)", line):
        candidate = f"{current} {word}" if current else word
        if current and len(candidate) > width and len(margin + word.lstrip()) <= width:
            out.append(current)
            current = margin + word.lstrip()
        else:
            current = candidate
        while len(current) > width:
            out.append(current[:width])
            current = margin + current[width:]
    out.append(current)
    return out


def fit_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], width: int = WIDTH
) -> List[str]:
    """:func:`pynumabind._text.table` within ``width``: the last column wraps under itself.

    When the other columns leave the last fewer than 24 characters, each row
    is written on its own instead, as ``first: header=value, ...``.
    """
    text = table(headers, rows).splitlines()
    if all(len(line) <= width for line in text):
        return text
    lead = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers) - 1)]
    start = sum(lead) + 2 * len(lead)
    if width - start >= 24:
        out: List[str] = []
        for row in [list(headers), *[list(r) for r in rows]]:
            head = "".join(str(cell).ljust(lead[i] + 2) for i, cell in enumerate(row[:-1]))
            out += wrap(head + str(row[-1]), width, indent=start)
        return out
    out = []
    for cells in rows:
        pairs = ", ".join(f"{h}={v}" for h, v in zip(headers[1:], cells[1:]))
        out += wrap(f"  {cells[0]}: {pairs}", width)
    return out


def _check_lines(check: Check) -> List[str]:
    label = _LABELS[check.verdict]
    head = f"  {label:<8}  {check.name} ({check.subject})"
    return [*wrap(head), *wrap(f"            {check.detail}")]


def summary(report: Report) -> List[str]:
    """The result line: what disagrees or failed, and the exit status."""
    counts = report.counts()
    total = len(report.checks)
    if report.exit_status == 0:
        said = (
            f"Result: no cross-check disagrees ({counts['agree']} agree, "
            f"{counts[NOT_APPLICABLE]} not applicable of {total}); exit status 0"
        )
    else:
        parts = []
        if report.disagreements:
            names = ", ".join(dict.fromkeys(c.name for c in report.disagreements))
            parts.append(f"{counted(len(report.disagreements), 'cross-check')} disagree ({names})")
        if report.failed_sections:
            parts.append(f"section(s) failed: {', '.join(report.failed_sections)}")
        if report.failed_checks:
            names = ", ".join(f.split(":", 1)[0] for f in report.failed_checks)
            parts.append(f"cross-check(s) failed to run: {names}")
        said = f"Result: {'; '.join(parts)}; exit status 1"
    return wrap(said)


def render(report: Report) -> str:
    """The whole text report (see the module docstring)."""
    lines = [
        f"pynumabind report -- pynumabind {report.version}, {report.created}, host {report.host}"
        + (" (redacted)" if report.redacted else ""),
        *summary(report),
        *wrap(f"Attach this file to an issue: {ISSUES}"),
        "",
        "Cross-checks",
    ]
    for check in report.checks:
        lines += _check_lines(check)
    for failure in report.failed_checks:
        lines += wrap(f"  FAILED    {failure}")
    for section in report.sections:
        lines += ["", f"== {section.title} ==", ""]
        if section.status == FAILED:
            lines += wrap(f"FAILED: {section.reason}")
            if section.traceback:
                lines += ["  " + line for line in section.traceback.rstrip().splitlines()[-12:]]
        elif section.status == SKIPPED:
            lines += wrap(f"skipped: {section.reason}")
        for line in section.lines:
            lines += wrap(line)
    return "\n".join(line.rstrip() for line in lines) + "\n"
