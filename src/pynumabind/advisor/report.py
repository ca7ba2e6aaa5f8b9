"""The text report of an :class:`~pynumabind.Advice`: the public home of :func:`render_text`.

``str(advice)`` is the report ``pynumabind advise`` prints, and 0.1.0
published its renderer here, as ``pynumabind.advisor.report.render_text``.
It is defined beside the values it renders, in
:mod:`pynumabind.records.report` (whose docstring says what the report
holds, in which order), because ``str(advice)`` must not import the advisor.
"""

from __future__ import annotations

from ..records.report import render_text

__all__: list[str] = []  # nothing here is public API: the names are the package's own
