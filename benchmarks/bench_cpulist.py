"""Cost of parsing hostile cpulists and cpumasks: time and peak traced memory.

``python -m benchmarks.bench_cpulist`` prints one JSON line per case.  The
parsers promise O(len(text) + max_id) work; these numbers show what that
means for megabyte inputs on this machine.
"""

from __future__ import annotations

import json
import time
import tracemalloc
from typing import Callable, List, Tuple

from pynumabind.cpulist import parse_cpulist, parse_cpumask
from pynumabind.errors import ListParseError

MB = 1 << 20

CASES: List[Tuple[str, Callable[[], object]]] = [
    ("range 0-4294967295", lambda: parse_cpulist("0-4294967295")),
    ("'0-65535,' * 100000 (0.8 MB, trailing comma)", lambda: parse_cpulist("0-65535," * 100000)),
    ("'0-65535,' * 100000 + '0'", lambda: parse_cpulist("0-65535," * 100000 + "0")),
    ("'0,' * 500000 + '1' (1 MB of items)", lambda: parse_cpulist("0," * 500000 + "1")),
    ("distinct singles 0..65535 (370 kB)", lambda: parse_cpulist(",".join(map(str, range(65536))))),
    ("'0-65535:1/2,' * 87381 (1 MB group forms)", lambda: parse_cpulist("0-65535:1/2," * 87381)),
    (
        "distinct group forms a-65535:1/2 (840 kB)",
        lambda: parse_cpulist(",".join(f"{a}-65535:1/2" for a in range(65536))),
    ),
    ("1 MB of digits", lambda: parse_cpulist("1" * MB)),
    ("1 MB of leading zeros then 7", lambda: parse_cpulist("0" * MB + "7")),
    ("1 MB of whitespace then 0", lambda: parse_cpulist(" " * MB + "0")),
    ("1 MB of whitespace inside an item", lambda: parse_cpulist("0" + " " * MB + "1")),
    ("1 MB garbage", lambda: parse_cpulist("x" * MB)),
    ("1 MB of '!'", lambda: parse_cpulist("!" * MB, universe={0, 1})),
    ("mask: '00000000,' * 116508 (1 MB)", lambda: parse_cpumask("00000000," * 116508 + "1")),
    (
        "mask: 2048 words of ffffffff (64k ids)",
        lambda: parse_cpumask(",".join(["ffffffff"] * 2048)),
    ),
    ("mask: 10**6 zero NVML words", lambda: parse_cpumask([0] * 10**6)),
]


def _run(call: Callable[[], object]) -> object:
    try:
        return len(call())  # type: ignore[arg-type]
    except ListParseError as exc:
        return f"ListParseError: {str(exc)[:60]}"


def main() -> None:
    """Time each case, then run it again under tracemalloc for its peak memory."""
    for name, call in CASES:
        began = time.perf_counter()
        result = _run(call)
        seconds = time.perf_counter() - began
        tracemalloc.start()
        _run(call)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        row = {"case": name, "seconds": round(seconds, 4), "peak_MiB": round(peak / MB, 1)}
        row["result"] = result
        print(json.dumps(row))


if __name__ == "__main__":
    main()
