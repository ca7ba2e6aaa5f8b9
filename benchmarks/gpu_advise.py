"""On a GPU machine: ``python -m benchmarks.gpu_advise [--out DIR] [--quick]``.

One ready script for the day a GPU machine is lent: it runs

1. ``pynumabind.advise()`` (memory per CPU node x memory node, pinned
   H2D/D2H per GPU x CPU node, firmware tables, the recommendation), and
2. the GPU copy benchmark: the same pinned copies (the library's own code,
   :func:`pynumabind.advisor._copies.measure_gpus`) at several sizes, so that
   small-copy overhead and large-copy bandwidth are both on record,

and writes ``gpu-advise.json`` (everything, with machine facts, the
topology, ``nvidia-smi topo -m`` when that tool exists) and
``gpu-advise.md`` (the text report and the copy tables for the README), plus
``gpu-advise.png`` when matplotlib is installed.

Robust by design: every step is wrapped, a failing step is recorded with
its error and the next one still runs, and the files are written even when
CUDA is not usable (they then say why); the exit status is 0 when the
files were written with a GPU measured, 1 when no GPU could be measured.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from typing import Any, Callable, Dict, List, Optional

from .common import detect_topology, say

DEFAULT_OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
COPY_SIZES_MIB = (8, 64, 512)


def _step(results: Dict[str, Any], name: str, work: Callable[[], Any]) -> Any:
    """Run one step; record its result or its error (never raise)."""
    say(f"[{name}]")
    began = time.monotonic()
    try:
        value = work()
    except Exception as exc:  # a broken step must not lose the others
        results.setdefault("errors", {})[name] = "".join(
            traceback.format_exception_only(type(exc), exc)
        ).strip()
        say(f"  {name} failed: {type(exc).__name__}: {exc}")
        value = None
    results.setdefault("durations_s", {})[name] = round(time.monotonic() - began, 2)
    return value


def _nvidia_smi_topology() -> Optional[str]:
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return None
    done = subprocess.run(
        [tool, "topo", "-m"], capture_output=True, text=True, timeout=60, check=False
    )
    return done.stdout if done.returncode == 0 else f"exit {done.returncode}: {done.stderr}"


def _copy_benchmark(quick: bool) -> Dict[str, Any]:
    """Pinned copies per GPU x CPU node at several sizes (the library's measurement code)."""
    from pynumabind.advisor import _copies

    backend, why = _copies.find_backend()
    if backend is None:
        return {"measured": False, "reason": why}
    topology = detect_topology()
    nodes = [
        n.id
        for n in topology.nodes.values()
        if n.cpus & topology.allowed_cpus and n.has_memory and n.id in topology.allowed_mems
    ]
    runs = []
    for mib in COPY_SIZES_MIB[:2] if quick else COPY_SIZES_MIB:
        copies = _copies.measure_gpus(
            backend,
            topology,
            nodes,
            size=mib << 20,
            repeats=5 if quick else 11,
            progress=lambda line: say(f"  {line}"),
        )
        runs.append({"size_mib": mib, "gpus": [g.to_dict() for g in copies]})
    return {"measured": True, "backend": backend.name, "runs": runs}


def _copy_tables(bench: Dict[str, Any]) -> List[str]:
    if not bench.get("measured"):
        return [f"Copy benchmark: not run: {bench.get('reason')}", ""]
    lines = [
        f"Copy benchmark ({bench['backend']}), pinned buffer and thread on each node, GB/s:",
        "",
    ]
    lines += ["| size | GPU | its node | from node | H2D median | D2H median | buffer |"]
    lines += ["|---|---|---|---|---|---|---|"]
    for run in bench["runs"]:
        for gpu in run["gpus"]:
            for k, node in enumerate(gpu["cpu_nodes"]):
                where = gpu["placement"][k]
                landed = "-" if where is None else f"{where['fraction']:.0%} on node {node}"
                h2d, d2h = gpu["h2d_gbs"][k], gpu["d2h_gbs"][k]
                lines.append(
                    f"| {run['size_mib']} MiB | {gpu['index']} {gpu['name'] or ''} | "
                    f"{gpu['numa_node']} | {node} | "
                    f"{'-' if h2d is None else f'{h2d:.3g}'} | "
                    f"{'-' if d2h is None else f'{d2h:.3g}'} | {landed} |"
                )
    return [*lines, ""]


def markdown(results: Dict[str, Any]) -> str:
    lines = [f"## `pynumabind advise` on a GPU machine ({results['created']})", ""]
    machine = results.get("machine") or {}
    lines += [
        f"Machine: {machine.get('cpu_model', '?')}, kernel {machine.get('kernel', '?')}, "
        f"{machine.get('logical_cpus', '?')} CPUs; pynumabind {results['pynumabind']}.",
        "",
    ]
    if results.get("advise_text"):
        lines += ["```", results["advise_text"], "```", ""]
    lines += _copy_tables(results.get("copy_benchmark") or {"reason": "the step failed"})
    for name, error in (results.get("errors") or {}).items():
        lines.append(f"- step `{name}` failed: {error}")
    return "\n".join(lines).rstrip() + "\n"


def _write(
    results: Dict[str, Any], out: str, advice_document: Optional[Dict[str, Any]]
) -> List[str]:
    os.makedirs(out, exist_ok=True)
    written = []
    for name, text in (
        ("gpu-advise.json", json.dumps(results, indent=1) + "\n"),
        ("gpu-advise.md", markdown(results)),
    ):
        path = os.path.join(out, name)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        written.append(path)
    if advice_document is not None:
        try:
            from pynumabind.cli._advise import write_plot

            path = os.path.join(out, "gpu-advise.png")
            write_plot(advice_document, path)
            written.append(path)
        except Exception as exc:  # matplotlib missing: the JSON and Markdown still count
            say(f"  no plot: {exc}")
    return written


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_advise", description=__doc__)
    parser.add_argument("--out", default=DEFAULT_OUT, help="output directory (%(default)s)")
    parser.add_argument("--quick", action="store_true", help="smaller, fewer measurements")
    args = parser.parse_args(argv)

    import pynumabind

    from .machine import detect_virtualization, machine_info, topology_snapshot

    results: Dict[str, Any] = {
        "schema": 1,
        "suite": "pynumabind-gpu-advise",
        "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "quick": args.quick,
        "pynumabind": pynumabind.__version__,
        "python": sys.version.split()[0],
    }
    results["machine"] = _step(results, "machine", machine_info)
    results["virtualization"] = _step(
        results, "virtualization", lambda: detect_virtualization().to_dict()
    )
    results["topology"] = _step(results, "topology", topology_snapshot)
    results["nvidia_smi_topo"] = _step(results, "nvidia-smi", _nvidia_smi_topology)

    def run_advise() -> Any:
        from pynumabind.records.report import render_text

        advice = pynumabind.advise(quick=args.quick, progress=lambda line: say(f"  {line}"))
        results["advise_text"] = render_text(advice)
        return advice.to_dict()

    results["advise"] = _step(results, "advise", run_advise)
    results["copy_benchmark"] = _step(
        results, "copy benchmark", lambda: _copy_benchmark(args.quick)
    )
    for path in _write(results, args.out, results["advise"]):
        print(path)
    measured = bool((results.get("copy_benchmark") or {}).get("measured"))
    if not measured:
        say("no GPU was measured: see the reason in gpu-advise.md")
    return 0 if measured else 1


if __name__ == "__main__":
    sys.exit(main())
