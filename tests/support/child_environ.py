"""Child bodies that bind as a launched worker does: from its environment.

The tests give each child its own environment (launcher rank, visible GPUs,
``PYNUMABIND_*``); the child calls ``pynumabind.bind_current_process`` and
reports where it ended up.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional

import pynumabind

from .childstate import cpus_allowed


def _gpus(gpus: str) -> Optional[List[int]]:
    return [int(g) for g in gpus.split(",")] if gpus else None


def bind_and_report(rank: str = "", gpus: str = "") -> Dict[str, Any]:
    """``bind_current_process([rank], [gpus=...])``: its CPUs and reasons, or its error.

    ``rank`` and ``gpus`` (comma-separated) are passed only when not empty.
    """
    arguments: Dict[str, Any] = {}
    if gpus:
        arguments["gpus"] = _gpus(gpus)
    try:
        if rank:
            binding = pynumabind.bind_current_process(int(rank), **arguments)
        else:
            binding = pynumabind.bind_current_process(**arguments)
    except pynumabind.PynumabindError as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    assert binding.plan is not None
    return {"cpus": cpus_allowed(), "reasons": list(binding.plan.reasons)}


def bind_with_info_logging() -> bool:
    """Bind with the root logger at INFO on stderr (``LEVEL message``)."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    pynumabind.bind_current_process()
    return True


def bind_and_say_where() -> str:
    """``CPUS <list>`` after binding, or ``ERROR <type> <message>``."""
    try:
        pynumabind.bind_current_process()
    except pynumabind.PynumabindError as exc:
        return f"ERROR {type(exc).__name__} {exc}"
    return f"CPUS {cpus_allowed()}"


def print_argv_back(*args: str) -> List[str]:
    """The arguments as the child received them (test_child_sources checks the runner)."""
    return list(args)


def hook_binds_gpu0() -> Dict[str, Any]:
    """What a framework hook does: ``bind_gpus([0], what="hook")``; its CPUs or its error."""
    from pynumabind.integrations import bind_gpus

    try:
        binding = bind_gpus([0], what="hook")
    except pynumabind.PynumabindError as exc:
        return {"error": type(exc).__name__, "message": str(exc)}
    assert binding.plan is not None and binding.plan.cpus is not None
    return {"cpus": sorted(binding.plan.cpus)}


def bind_on_cpu1_and_say_why_not() -> str:
    """Narrow this process to CPU 1, bind without a rank: ``<error type> <message>``."""
    import os

    os.sched_setaffinity(0, {1})
    try:
        pynumabind.bind_current_process()
    except pynumabind.PynumabindError as exc:
        return f"{type(exc).__name__} {exc}"
    return "bound"
