"""Child body of records/test_record.py: bind a fresh interpreter in mode advised, report."""

from __future__ import annotations

from typing import Any, Dict

from pynumabind._os import libnuma as _libnuma
from pynumabind.binding import bind_current_process


def bind_advised(record: str) -> Dict[str, Any]:
    binding = bind_current_process(0, mode="advised", environ={"PYNUMABIND_ADVICE": record})
    return {
        "not_bound": binding.not_bound,
        "applied": binding.applied,
        "summary": binding.summary(),
        "policy": _libnuma.get_mempolicy().kernel_policy,
    }
