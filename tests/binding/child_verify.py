"""Child body of binding/test_verify.py: ``check`` and ``verify()`` judge the same pages."""

from __future__ import annotations

from typing import Any, Dict

from pynumabind import binding as binding_module
from pynumabind._os import libnuma as _libnuma
from pynumabind.cli import _check
from pynumabind.discovery import detect_topology


def check_and_verify_twins(free: str) -> Dict[str, Any]:
    """Run ``check`` with every fresh page on node 1 and ``free`` bytes free on node 0."""
    snapshot = detect_topology(use_nvml=False).to_json(indent=None)
    real_page_nodes = _libnuma.page_nodes
    # The kernel put every fresh page on node 1, off the preferred node 0, and
    # node 0 has ``free`` bytes free.
    _libnuma.page_nodes = lambda buffer: [1 for _ in real_page_nodes(buffer)]
    _libnuma.node_memory = lambda node: (64 << 30, int(free))
    verified: Dict[str, Any] = {}
    real_verify = binding_module.Binding.verify

    def keep(self: binding_module.Binding, pages: int = 16) -> Any:
        verified["result"] = real_verify(self, pages)
        return verified["result"]

    binding_module.Binding.verify = keep  # type: ignore[method-assign]
    report = _check.check_this_process(0, 1, {"policy": "preferred"}, snapshot)
    return {"report": report.to_dict(), "verify": verified["result"].to_dict()}
