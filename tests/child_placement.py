"""Child bodies of test_placement.py: memory placement under a real seccomp filter.

pynumabind and libnuma load first (at import of this module, then
``_libnuma.load()``), the filter goes in after, as in the old child text.
"""

from __future__ import annotations

import mmap
from typing import Any, Callable, Dict, List, Tuple

import seccomp_filter
from pynumabind._os import libnuma as _libnuma
from pynumabind.binding.placement import bind_memory, memory_on


def _filter(denied: str) -> None:
    """Load libnuma, then deny the syscalls ``denied`` (comma-separated numbers) with EPERM."""
    _libnuma.load()
    seccomp_filter.install(tuple(int(nr) for nr in denied.split(",")))


def bind_and_memory_on(denied: str) -> Dict[str, Any]:
    _filter(denied)
    out: Dict[str, Any] = {}
    region = mmap.mmap(-1, 4 * mmap.PAGESIZE)
    region[0] = 1
    calls: List[Tuple[str, Callable[[], Any]]] = [
        ("bind", lambda: bind_memory(region, node=0)),
        ("memory_on", lambda: memory_on(node=0).__enter__()),
    ]
    for name, call in calls:
        try:
            call()
            out[name] = "no error"
        except Exception as exc:
            out[name] = [type(exc).__name__, getattr(exc, "errno", None), str(exc)]
    out["policy"] = _libnuma.get_mempolicy().mode
    return out


def memory_on_without_get_mempolicy(denied: str) -> Dict[str, Any]:
    _filter(denied)
    out: Dict[str, Any] = {}
    try:
        memory_on(node=0).__enter__()
    except Exception as exc:
        out["error"] = [type(exc).__name__, getattr(exc, "errno", None), str(exc)]
    return out


def bind_without_move_pages(denied: str) -> Dict[str, Any]:
    _filter(denied)
    region = mmap.mmap(-1, 4 * mmap.PAGESIZE)
    result = bind_memory(region, node=0)
    return {"result": result.to_dict(), "summary": result.summary()}
