"""``python -m benchmarks [--quick] [--only NAME ...]``: run the suite, write JSON, Markdown, PNGs.

Outputs (default directory ``benchmarks/results/``, git-ignored):

* ``results.json`` (latest run) and ``results-<UTC timestamp>.json``;
* ``results.md``, a Markdown table for the README;
* ``scaling.png``, ``threads.png``, ``overhead.png``, ``advise.png`` (memory
  bandwidth per CPU node x memory node, and copies per GPU x node with a GPU),
  ``jitter.png``.

``python -m benchmarks --render results.json`` re-renders an existing run.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import sys
import time
from typing import Any, Callable, Dict, List, Optional

from .common import Settings, say
from .machine import (
    bytecode_state,
    bytecode_warning,
    detect_virtualization,
    machine_info,
    topology_snapshot,
)
from .report import write_reports

SCHEMA_VERSION = 1
DEFAULT_OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
SUITES = ("targets", "scaling", "threads", "overhead", "advise", "jitter", "firsttouch")


def _runner(name: str) -> Callable[[Settings], Dict[str, Any]]:
    if name == "targets":
        from .targets import run_targets

        return run_targets
    if name == "scaling":
        from .scaling import run_scaling

        return run_scaling
    if name == "threads":
        from .threads import run_threads

        return run_threads
    if name == "overhead":
        from .overhead import run_overhead

        return run_overhead
    if name == "advise":
        from .advising import run_advise

        return run_advise
    if name == "firsttouch":
        from .firsttouch import run_firsttouch

        return run_firsttouch
    from .jitter import run_jitter

    return run_jitter


def ffi_mode() -> str:
    """Whether pynumabind's cffi declarations are pre-generated or parsed at run time."""
    if importlib.util.find_spec("pynumabind._libnuma_ffi") is not None:
        return "generated out-of-line module (installed package)"
    return "declarations parsed at run time (editable install: first libnuma use is slower)"


def collect(settings: Settings, suites: List[str]) -> Dict[str, Any]:
    """Run ``suites`` and return the complete results document."""
    import pynumabind

    from .ckernels import load_kernels

    kernels, why = load_kernels(settings.build_dir)
    signature = kernels.hypervisor_signature() if kernels is not None else None
    virtualization = detect_virtualization(cpuid_signature=signature)
    say(f"pynumabind benchmarks ({'quick' if settings.quick else 'full'}): {', '.join(suites)}")
    say(f"  {virtualization.verdict}")
    if kernels is None:
        say(f"  {why}")
    bytecode = bytecode_state(os.path.dirname(pynumabind.__file__))
    if bytecode["stale"]:
        say(f"  {bytecode_warning(bytecode)}")
    results: Dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "suite": "pynumabind-benchmarks",
        "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "quick": settings.quick,
        "pynumabind": {
            "version": pynumabind.__version__,
            "path": os.path.dirname(pynumabind.__file__),
        },
        "ffi_mode": ffi_mode(),
        "bytecode": bytecode,
        "c_kernels": {"available": kernels is not None, "reason": why or None},
        "machine": machine_info(),
        "virtualization": virtualization.to_dict(),
        "topology": topology_snapshot(),
        "benchmarks": {},
        "durations_s": {},
        "load_average": {"start": round(os.getloadavg()[0], 2)},
    }
    for name in suites:
        say(f"[{name}]")
        start = time.monotonic()
        try:
            results["benchmarks"][name] = _runner(name)(settings)
        except Exception as exc:  # one broken suite must not lose the others' numbers
            results["benchmarks"][name] = {"error": f"{type(exc).__name__}: {exc}"}
            say(f"  {name} failed: {type(exc).__name__}: {exc}")
        results["durations_s"][name] = round(time.monotonic() - start, 2)
    results["load_average"]["end"] = round(os.getloadavg()[0], 2)
    return results


def write_results(results: Dict[str, Any], directory: str) -> List[str]:
    os.makedirs(directory, exist_ok=True)
    stamp = results["created"].replace(":", "").replace("-", "")
    paths = [
        os.path.join(directory, "results.json"),
        os.path.join(directory, f"results-{stamp}.json"),
    ]
    text = json.dumps(results, indent=1, sort_keys=False) + "\n"
    for path in paths:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    return paths


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="short run (< 1 minute)")
    parser.add_argument(
        "--only", nargs="+", choices=SUITES, metavar="NAME", help=f"run only these: {SUITES}"
    )
    parser.add_argument("--out", default=DEFAULT_OUT, help="output directory (%(default)s)")
    parser.add_argument(
        "--no-install",
        action="store_true",
        help="do not apt-get install numactl when it is missing (report it unavailable)",
    )
    parser.add_argument("--render", metavar="JSON", help="only re-render an existing results file")
    args = parser.parse_args(argv)

    if args.render:
        with open(args.render, encoding="utf-8") as handle:
            results = json.load(handle)
        for path in write_reports(results, args.out):
            print(path)
        return 0

    settings = Settings(quick=args.quick, install_numactl=not args.no_install)
    start = time.monotonic()
    results = collect(settings, list(args.only or SUITES))
    results["durations_s"]["total"] = round(time.monotonic() - start, 2)
    written = write_results(results, args.out) + write_reports(results, args.out)
    say(f"done in {results['durations_s']['total']:.0f} s")
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
