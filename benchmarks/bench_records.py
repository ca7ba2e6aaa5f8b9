"""Cost of reading advice records, hostile and valid: what every worker in mode ``advised`` pays.

``python -m benchmarks.bench_records`` prints one JSON line per case: the
median of a few runs of :func:`pynumabind.records.store.load_record` on the
file (read, bounded, parsed, checked; see :mod:`pynumabind.records._validate`),
as CPU time (what the process spent, steady on a loaded machine) and wall
time, its size, and what came of it.  The hostile cases are refused before the JSON
is parsed, or before its typed read; the valid ones show what a real record
of a large machine costs.  A 9.8 MB record whose machine lists 1,800 nodes
(the first case) took 8 s per worker before the bounds existed.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from typing import Any, Callable, Dict, List, Tuple

from pynumabind.advisor.rule import decide
from pynumabind.errors import AdviceRecordError
from pynumabind.records import store
from pynumabind.records._json import record_dict
from pynumabind.records._machine import Machine, MachineGpu, MachineNode
from pynumabind.records.advice import Advice
from pynumabind.records.values import (
    CopyCell,
    Firmware,
    GpuCopies,
    HmatEntry,
    MemoryCell,
    MemoryMatrix,
    Placement,
    Spread,
)

RUNS = 5


def _spread(median: float) -> Spread:
    return Spread.of([median * (0.98 + 0.005 * i) for i in range(9)])


def valid(nodes: int, gpus: int) -> Dict[str, Any]:
    """A record as ``advise --save`` writes it: ``nodes`` nodes, ``gpus`` GPUs, all measured."""
    ids = tuple(range(nodes))
    cells = tuple(
        tuple(
            MemoryCell(
                _spread(100.0 if i == j else 60.0),
                _spread(90.0 if i == j else 140.0),
                Placement(j, {j: 64}),
                threads=8,
            )
            for j in ids
        )
        for i in ids
    )
    memory = MemoryMatrix(ids, ids, cells, 1 << 28, 1 << 25, _spread(2.0), "STREAM triad", ())
    copies = [
        GpuCopies(
            g, "GPU", f"0000:{g + 16:02x}:00.0", g % nodes,
            tuple(CopyCell(n, _spread(50.0 if n == g % nodes else 36.0),
                           _spread(49.0 if n == g % nodes else 35.0), Placement(n, {n: 32}))
                  for n in ids),
            1 << 26,
        )
        for g in range(gpus)
    ]  # fmt: skip
    slit = tuple(tuple(10 if a == b else 21 for b in ids) for a in ids)
    hmat = tuple(HmatEntry(n, 0, (n,), 100000, 90000, 80, 85) for n in ids)
    advice = Advice(
        memory,
        tuple(copies),
        "measured",
        "bench",
        Firmware(ids, slit, hmat),
        decide(memory, copies),
    )
    machine = Machine(
        "Bench CPU",
        tuple(MachineNode(n, frozenset(range(8 * n, 8 * n + 8)), 1 << 38) for n in ids),
        slit,
        tuple(MachineGpu(f"0000:{g + 16:02x}:00.0", "PCI 10de:2335") for g in range(gpus)),
        "6.8.0",
    )
    return record_dict(advice, machine, "2026-12-03T10:00:00Z", "bench")


def huge_fingerprint(nodes: int, distances: bool = True) -> str:
    doc = valid(2, 2)
    doc["machine"]["nodes"] = [{"id": i, "cpus": str(i), "memory_bytes": 1} for i in range(nodes)]
    rows = [[10 if i == j else 20 for j in range(nodes)] for i in range(nodes)]
    doc["machine"]["distances"] = rows if distances else []
    return json.dumps(doc, separators=(",", ":"))


HEAD = '{"record": "pynumabind advice", "schema": 1, "x": '
CASES: List[Tuple[str, Callable[[], str]]] = [
    ("hostile: 1,800-node fingerprint (9.8 MB)", lambda: huge_fingerprint(1800)),
    ("hostile: 16 MiB of '['", lambda: "[" * (16 << 20)),
    ("hostile: a list of 2 million values (4 MB)", lambda: HEAD + "[" + "0," * 2_000_000 + "0]}"),
    ("hostile: 1,800 nodes, no distances (80 kB)", lambda: huge_fingerprint(1800, False)),
    ("hostile: nesting 100,000 deep (200 kB)", lambda: HEAD + "[" * 100_000 + "]" * 100_000 + "}"),
    ("valid: 2 nodes, 2 GPUs", lambda: json.dumps(valid(2, 2), indent=2)),
    ("valid: 16 nodes, 16 GPUs", lambda: json.dumps(valid(16, 16), indent=2)),
    ("valid: 64 nodes, 16 GPUs", lambda: json.dumps(valid(64, 16), indent=2)),
]


def _load(path: str) -> str:
    try:
        store.load_record(path)
    except AdviceRecordError as exc:
        return f"AdviceRecordError: {str(exc)[len('advice record ') + len(path) :][:90]}"
    return "read"


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-records-") as folder:
        for name, make in CASES:
            path = os.path.join(folder, "advice.json")
            with open(path, "w", encoding="utf-8") as out:
                out.write(make())
            cpu, wall = [], []
            for _ in range(RUNS):
                began, began_cpu = time.perf_counter(), time.process_time()
                result = _load(path)
                cpu.append(time.process_time() - began_cpu)
                wall.append(time.perf_counter() - began)
            row = {
                "case": name,
                "bytes": os.path.getsize(path),
                "cpu_ms": round(statistics.median(cpu) * 1000, 1),
                "wall_ms": round(statistics.median(wall) * 1000, 1),
                "result": result,
            }
            print(json.dumps(row))


if __name__ == "__main__":
    main()
