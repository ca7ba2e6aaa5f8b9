"""Memory per CPU node x memory node, and host<->GPU copies: ``pynumabind.advise``.

The suite keeps no measurement code of its own: it runs the library's
``advise`` (threads bound per CPU node, buffers placed with ``memory_on``
and checked with ``move_pages``, pinned copies per GPU x node when CUDA is
usable) and keeps its JSON document and its text report.
"""

from __future__ import annotations

from typing import Any, Dict

from .common import Settings, say

__all__ = ["run_advise"]


def run_advise(settings: Settings) -> Dict[str, Any]:
    from pynumabind import advise
    from pynumabind.records.report import render_text

    advice = advise(quick=settings.quick, progress=lambda line: say(f"  {line}"))
    return {"available": True, "advice": advice.to_dict(), "text": render_text(advice)}
