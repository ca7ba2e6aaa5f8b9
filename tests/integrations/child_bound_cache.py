"""Child bodies of test_bound_cache.py: real binds through the integration helpers.

Run through :func:`childproc.run_in_child` with PYNUMABIND_TOPOLOGY naming the
two-node snapshot, so the pytest process is never left bound.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional

from pynumabind.integrations import _common, bind_gpu


def cpus() -> Optional[str]:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("Cpus_allowed_list"):
                return line.split()[1]
    return None


def restored_binding_not_handed_back() -> Dict[str, Any]:
    first = bind_gpu(1, what="t")
    again = bind_gpu(1, what="t")
    first.restore()
    unbound = cpus()
    second = bind_gpu(1, what="t")
    return {
        "cached": again is first,
        "unbound": unbound,
        "fresh": second is not first,
        "restored": second.restored,
        "bound": cpus(),
    }


def _in_the_forked_child(parent: Any) -> Dict[str, Any]:
    try:
        empty = not _common._BOUND
        child = bind_gpu(1, what="t")
        assert child._undo is not None
        out: Dict[str, Any] = {
            "empty": empty,
            "fresh": child is not parent,
            "pid": child._undo.pid == os.getpid(),
            "bound": cpus(),
        }
        child.restore()  # its own: allowed in the child
        out["restored"] = cpus()
    except BaseException as exc:
        out = {"error": repr(exc)}
    return out


def forked_child_binds_for_itself() -> Dict[str, Any]:
    parent = bind_gpu(1, what="t")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            os.write(write, json.dumps(_in_the_forked_child(parent)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child: Dict[str, Any] = json.loads(pipe.read())
    os.waitpid(pid, 0)
    child["parent_still_cached"] = bind_gpu(1, what="t") is parent
    return child
