"""The integration helpers' once-per-process cache never hands back a stale Binding (issue 25).

``bind_gpu``/``bind_gpus`` remember the Binding they made (``_BOUND``) so a
second hook in the same process does not bind again.  Before the fix, after
``restore()`` a second ``bind_gpu(1)`` returned the restored object (the
process unbound, the Binding claiming CPUs bound), and in a forked child the
cache returned the parent's Binding.  Real binds in child interpreters, on
the two-node snapshot over this machine's CPUs 0 and 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Dict

from .helpers import require_two_cpus

PRELUDE = """
import json, os, sys
from pynumabind.integrations import bind_gpu, _common
def cpus():
    with open("/proc/self/status") as status:
        return [l.split()[1] for l in status if l.startswith("Cpus_allowed_list")][0]
"""


def _run(code: str, snapshot: Path) -> Dict[str, Any]:
    require_two_cpus()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYNUMABIND_")}
    env.update({"PYNUMABIND_TOPOLOGY": str(snapshot), "CUDA_VISIBLE_DEVICES": "0,1"})
    done = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result: Dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_restored_binding_is_never_handed_back(snapshot: Path) -> None:
    result = _run(
        """
        first = bind_gpu(1, what="t")
        again = bind_gpu(1, what="t")
        first.restore()
        unbound = cpus()
        second = bind_gpu(1, what="t")
        print(json.dumps({"cached": again is first, "unbound": unbound,
                          "fresh": second is not first, "restored": second.restored,
                          "bound": cpus()}))
        """,
        snapshot,
    )
    assert result["cached"] is True  # in force: bound once per process
    assert result["unbound"] == "0-1"
    assert result["fresh"] is True and result["restored"] is False
    assert result["bound"] == "1"  # bound again, for real


def test_a_forked_child_binds_for_itself(snapshot: Path) -> None:
    result = _run(
        """
        parent = bind_gpu(1, what="t")
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            try:
                empty = not _common._BOUND
                child = bind_gpu(1, what="t")
                out = {"empty": empty, "fresh": child is not parent,
                       "pid": child._undo.pid == os.getpid(), "bound": cpus()}
                child.restore()  # its own: allowed in the child
                out["restored"] = cpus()
            except BaseException as exc:
                out = {"error": repr(exc)}
            os.write(write, json.dumps(out).encode())
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as pipe:
            child = json.loads(pipe.read())
        os.waitpid(pid, 0)
        child["parent_still_cached"] = bind_gpu(1, what="t") is parent
        print(json.dumps(child))
        """,
        snapshot,
    )
    assert "error" not in result, result
    assert result["empty"] is True  # the cache was dropped at fork
    assert result["fresh"] is True and result["pid"] is True
    assert result["bound"] == "1"
    assert result["restored"] == "1"  # the mask the child inherited, bound by its parent
    assert result["parent_still_cached"] is True
