"""Child bodies of records/test_directory.py and test_fleet_cli.py: racing writers, readers, nobody.

Each runs in a fresh interpreter (``tests.support.childproc``): the racing
writers and readers so that several run at once, the worker under ``nobody``
because it drops its privileges for good.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Dict, List

from pynumabind.records import store
from pynumabind.records._machine import Machine, MachineNode
from pynumabind.records.advice import Advice
from pynumabind.records.values import Recommendation

NOBODY = 65534


def other_machine() -> Machine:
    """A machine of another type than this one: two nodes, a CPU model no machine has."""
    return Machine(
        cpu_model="Other CPU 9000 (test)",
        nodes=(
            MachineNode(0, frozenset(range(0, 8)), 64 << 30),
            MachineNode(1, frozenset(range(8, 16)), 64 << 30),
        ),
        distances=((10, 21), (21, 10)),
        gpus=(),
        kernel="6.1.0-test",
    )


def advice(bind: bool, note: str = "") -> Advice:
    """An advice with no measurement whose verdict is ``bind`` (the note tells saves apart)."""
    verdict = "bind (test)" if bind else "no measurable difference (test)"
    recommendation = Recommendation(
        bind=bind,
        mode="node" if bind else "none",
        policy="preferred" if bind else "none",
        verdict=verdict,
        reasons=(note,) if note else (),
    )
    return Advice(None, (), "not measured (test)", None, None, recommendation)


def save_repeatedly(place: str, kind: str, times: str) -> List[str]:
    """Save ``times`` records of this machine (``kind`` "here") or of :func:`other_machine`."""
    machine = store.this_machine() if kind == "here" else other_machine()
    written = {
        store.save_record(advice(kind == "here", f"{kind} {i}"), place, machine=machine)
        for i in range(int(times))
    }
    return sorted(written)


def read_repeatedly(place: str, times: str) -> Dict[str, Any]:
    """Read ``place`` ``times`` times as a worker does: how often the record was whole and found."""
    here = store.this_machine()
    found = missing = 0
    problems: List[str] = []
    for _ in range(int(times)):
        record, problem = store._search([place], here)
        if record is not None:
            found += 1
        elif "no advice record" in problem and "cannot be read" not in problem:
            missing += 1  # before the first writer's rename
        else:
            problems.append(problem)
    return {"found": found, "missing": missing, "problems": problems[:3]}


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _bind_advised(place: str) -> Dict[str, Any]:
    from pynumabind.binding import bind_current_process

    warnings = _Warnings()
    logger = logging.getLogger("pynumabind")
    logger.addHandler(warnings)
    try:
        binding = bind_current_process(0, mode="advised", environ={"PYNUMABIND_ADVICE": place})
    finally:
        logger.removeHandler(warnings)
    return {
        "uid": os.getuid(),
        "gid": os.getgid(),
        "not_bound": binding.not_bound,
        "reasons": list(binding.plan.reasons),
        "warnings": warnings.messages,
    }


def bind_as_nobody(place: str) -> Dict[str, Any]:
    """A worker running as ``nobody`` binds in mode advised with ``PYNUMABIND_ADVICE=place``.

    The interpreter lives under /root, which nobody may not read, so this
    child first binds once as root (every module the bind path imports is
    then loaded), then forks; the fork drops to nobody (setgroups, setgid,
    setuid), forgets the warnings already given, and binds again: what it
    reads, it reads as nobody.
    """
    as_root = _bind_advised(place)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            store._WARNED.clear()
            found: Dict[str, Any] = _bind_advised(place)
        except BaseException as exc:  # reported to the parent
            found = {"error": repr(exc)}
        os.write(write_end, json.dumps(found).encode())
        os._exit(0)
    os.close(write_end)
    chunks = []
    while True:
        chunk = os.read(read_end, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    return {"root": as_root, "nobody": json.loads(b"".join(chunks) or b"{}"), "status": status}
