"""Render a results JSON into ``results.md`` (pasteable into the README) and PNG plots.

``render_markdown`` is pure (dict in, text out) so it is testable without
running anything; ``render_plots`` needs matplotlib (the ``bench`` extra).
"""

from __future__ import annotations

import math
import os
from typing import Any, Dict, List, Optional, Tuple

from .machine import bytecode_warning
from .stats import Summary

__all__ = ["loglog_slope", "render_markdown", "render_plots", "write_reports"]


def _s(data: Optional[Dict[str, Any]], digits: int = 3) -> str:
    if not data:
        return "n/a"
    return Summary.from_dict(data).text(digits)


def _t(data: Optional[Dict[str, Any]], digits: int = 3) -> str:
    """Like :func:`_s`, but microseconds of 1,000 and more are shown in ms."""
    if data and data.get("unit") == "us" and data.get("median", 0) >= 1000:
        return Summary.from_dict(data).scaled(1e-3, "ms").text(digits)
    return _s(data, digits)


def _range(data: Optional[Dict[str, Any]], digits: int = 3) -> str:
    if not data:
        return ""
    return f"{data['min']:.{digits}g}–{data['max']:.{digits}g}"


def _ratio_text(r: Dict[str, Any]) -> str:
    return f"×{r['value']:.3g} [{r['low']:.3g}–{r['high']:.3g}]"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(header: List[str], rows: List[List[Any]]) -> List[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def render_markdown(results: Dict[str, Any]) -> str:
    machine = results.get("machine", {})
    virt = results.get("virtualization", {})
    lines: List[str] = ["## Benchmark results", ""]
    nodes = results.get("topology", {})
    node_text = _nodes_text(nodes)
    lines += [
        f"Machine: {machine.get('cpu_model', '?')}, {machine.get('logical_cpus', '?')} logical "
        f"CPUs, {node_text}; Linux {machine.get('kernel', '?')}, Python "
        f"{machine.get('python', '?')}; libnuma cffi module: {results.get('ffi_mode', '?')}.",
        f"Run: {results.get('created', '?')}, {'quick' if results.get('quick') else 'full'} "
        "suite (`python -m benchmarks`). Figures are median [IQR] over repeated runs.",
        "",
        f"> **{virt.get('verdict', 'virtualization unknown')}**",
        "",
    ]
    bytecode = results.get("bytecode")
    if bytecode and bytecode.get("stale"):
        lines += [f"> **{bytecode_warning(bytecode)}**", ""]
    load = results.get("load_average")
    if load:
        lines += [
            "Load average (1 min) at the start and the end of the run: "
            f"{load.get('start', '?')} / {load.get('end', '?')} "
            f"on {machine.get('logical_cpus', '?')} CPUs (others' work makes the numbers noisy).",
            "",
        ]
    benches = results.get("benchmarks", {})
    if "targets" in benches:
        lines += _targets_md(benches["targets"], results.get("ffi_mode", ""))
    if "scaling" in benches:
        lines += _scaling_md(benches["scaling"])
    if "threads" in benches:
        lines += _threads_md(benches["threads"])
    if "overhead" in benches:
        lines += _overhead_md(benches["overhead"])
    if "advise" in benches:
        lines += _advise_md(benches["advise"])
    if "jitter" in benches:
        lines += _jitter_md(benches["jitter"])
    if "firsttouch" in benches:
        lines += _firsttouch_md(benches["firsttouch"])
    return "\n".join(lines).rstrip() + "\n"


def _nodes_text(snapshot: Dict[str, Any]) -> str:
    if snapshot.get("source") == "sysfs":
        nodes = snapshot.get("nodes", [])
    else:
        nodes = snapshot.get("topology", {}).get("nodes", [])
    parts = [f"node {n['id']}: CPUs {n.get('cpus') or '-'}" for n in nodes]
    return f"{len(nodes)} NUMA node{'s' if len(nodes) != 1 else ''} ({'; '.join(parts)})"


def _error_md(title: str, data: Dict[str, Any]) -> Optional[List[str]]:
    """A section that says why a suite has no numbers, or None when it has some."""
    if "error" in data:
        return [title, "", f"Failed: {data['error']}", ""]
    if data.get("available") is False:
        return [title, "", f"Unavailable: {data.get('reason')}", ""]
    return None


def _target_ratio(r: Optional[Dict[str, Any]]) -> str:
    if not r:
        return ""
    text = f"×{r['value']:.3g}"
    if r.get("low") is not None and r.get("high") is not None:
        text += f" [{r['low']:.3g}–{r['high']:.3g}]"
    return text


def _targets_md(data: Dict[str, Any], ffi_mode: str) -> List[str]:
    title = "### Discovery and binding cost against a numactl exec"
    failed = _error_md(title, data)
    if failed is not None:
        return failed
    out = [
        title,
        "",
        f"{data.get('rounds')} rounds, round-robin; every round starts one fresh process per row "
        f"(the second bind: {data.get('inner_reps')} calls per process; the DGX tree: "
        f"{max(1, (data.get('inner_reps') or 2) // 2)}). NVML hidden in the bind rows. "
        "*Ratio* is the row over its target (≤ 1: target met), with the range the quartiles "
        "give; *verdict* says whether that whole range is on one side of 1.",
        "",
    ]
    if data.get("interpreter"):
        before = data.get("bare_loaded_before_import")
        if before is None:
            preloaded = "not reported"
        elif before:
            preloaded = ", ".join(before)
        else:
            preloaded = "none of typing, re, enum, json, dataclasses, logging, contextlib"
        out += [
            f"Interpreter of the import and first-bind rows: {data['interpreter']}; loaded in "
            f"the bare one before `import pynumabind`: {preloaded}.",
            "",
        ]
    if "parsed at run time" in ffi_mode:
        out += [
            "**Editable install: libnuma's cffi declarations are parsed at run time, which the "
            "first-bind rows pay; run against an installed package for real figures.**",
            "",
        ]
    also = data.get("also", {})
    rows: List[List[Any]] = []
    for row in data.get("rows", []):
        if "summary" not in row:
            rows.append([row["what"], "n/a: " + str(row.get("error")), row["target"], "", ""])
            continue
        now = _t(row["summary"])
        key = row["key"]
        if key == "anchor" and "true" in also and "numactl_true" in also:
            now += (
                f" (paired per round; `numactl … true` {_t(also['numactl_true'])}, "
                f"`true` {_t(also['true'])})"
            )
        if key == "second_bind" and "reference" in row:
            now += f"; raw syscalls {_t(row['reference']['summary'])}"
        if key == "exec_start" and "python_pass" in also and "exec_python_pass" in also:
            now += (
                f" (paired per round; under `exec` {_t(also['exec_python_pass'])}, "
                f"`python -c pass` {_t(also['python_pass'])})"
            )
        if key == "import" and row.get("modules_after_import") is not None:
            forbidden = row.get("forbidden_loaded") or []
            now += "; loads " + (", ".join(forbidden) if forbidden else "none of pynvml/numpy/json")
        if key == "from_sysfs_dgx_h100" and "first_sysfs" in also:
            now += f"; first call in a process {_t(also['first_sysfs'])}"
        rows.append(
            [
                row["what"],
                now,
                row["target"],
                _target_ratio(row.get("ratio")),
                row.get("verdict", ""),
            ]
        )
    out += _table(["What", "Now: median [IQR]", "Target", "Ratio to target", "Verdict"], rows)
    numactl = data.get("numactl", {})
    if not numactl.get("available", True):
        out += ["", f"numactl unavailable: {numactl.get('status')}."]
    out.append("")
    return out


def loglog_slope(points: List[Tuple[float, float]]) -> Optional[float]:
    """Least-squares slope of log(y) on log(x): time grows as CPUs^slope (None: < 2 points)."""
    usable = [(math.log(x), math.log(y)) for x, y in points if x > 0 and y > 0]
    if len(usable) < 2:
        return None
    mx = sum(x for x, _ in usable) / len(usable)
    my = sum(y for _, y in usable) / len(usable)
    sxx = sum((x - mx) ** 2 for x, _ in usable)
    if sxx == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in usable) / sxx


def _scaling_md(data: Dict[str, Any]) -> List[str]:
    title = "### Scaling: detect + plan against the machine's size"
    failed = _error_md(title, data)
    if failed is not None:
        return failed
    modes = data.get("modes", [])
    out = [
        title,
        "",
        f"Generated sysfs trees ({data.get('tree_filesystem')}), one fresh process per tree; "
        f"detect (files only, NVML {data.get('nvml', 'not used')}) then plan rank 0 of one rank "
        "per GPU, the modes round-robin (rounds per tree: *Reps*). Cells: detect + plan, median "
        "[IQR]; "
        "the last row: the growth exponent k of time ∝ CPUs^k (least squares, ≥ 64 CPUs).",
        "",
    ]
    rows: List[List[Any]] = []
    for machine in data.get("machines", []):
        shape = (
            f"{machine['packages']} pkg, {machine['nodes']} node(s), "
            f"{'SMT' if machine.get('smt') else 'no SMT'}, {machine['gpus']} GPU(s), "
            f"{machine['pci_functions']} PCI fn"
        )
        if "error" in machine:
            rows.append(
                [machine["cpus"], shape, "", "", machine["error"][:120]] + [""] * len(modes)
            )
            continue
        cells = [_t(machine["modes"][m]["total"]) if m in machine["modes"] else "" for m in modes]
        node = machine["modes"].get(modes[0]) if modes else None
        split = f"{_t(node['detect'])} + {_t(node['plan'])}" if node else ""
        files, reps = machine.get("tree_files", ""), machine.get("reps", "")
        rows.append([machine["cpus"], shape, files, reps, split, *cells])
    slopes: List[Any] = []
    for mode in modes:
        points = [
            (float(m["cpus"]), m["modes"][mode]["total"]["median"])
            for m in data.get("machines", [])
            if m.get("cpus", 0) >= 64 and mode in m.get("modes", {})
        ]
        slope = loglog_slope(points)
        slopes.append("" if slope is None else f"k = {slope:.2f}")
    rows.append(["growth", "", "", "", "", *slopes])
    header = [
        "CPUs",
        "Machine",
        "Files",
        "Reps",
        f"{modes[0] if modes else ''}: detect + plan",
        *modes,
    ]
    out += _table(header, rows)
    out.append("")
    return out


def _threads_md(data: Dict[str, Any]) -> List[str]:
    title = "### Apply time against the number of threads"
    failed = _error_md(title, data)
    if failed is not None:
        return failed
    out = [
        title,
        "",
        "`binding.apply_plan(plan)` again and again in one process with N threads alive, against "
        "the raw floor (ctypes: `sched_setaffinity` on every thread + one `set_mempolicy`, masks "
        "built beforehand).",
        "",
    ]
    rows: List[List[Any]] = []
    for run in data.get("runs", []):
        threads = run.get("threads", run.get("requested"))
        if "apply" not in run:
            rows.append([threads, run.get("error", "failed"), _t(run.get("raw")), "", ""])
            continue
        per = run["apply"]["median"] / max(1, threads)
        rows.append(
            [
                threads,
                _t(run["apply"]),
                _t(run["raw"]),
                _ratio_text(run["ratio"]),
                f"{per:.3g} us",
            ]
        )
    out += _table(["Threads", "apply_plan", "Raw floor", "Ratio", "apply per thread"], rows)
    out.append("")
    return out


def _overhead_md(data: Dict[str, Any]) -> List[str]:
    out = ["### Cost of binding", ""]
    imp = data.get("import", {})
    rows: List[List[Any]] = [
        [
            "`import pynumabind` (`-X importtime`, cumulative)",
            _s(imp.get("importtime_cumulative")),
            f"pynvml {_yes_no(imp.get('pynvml_imported'))}, numpy "
            f"{_yes_no(imp.get('numpy_imported'))}; watched modules loaded: "
            + (", ".join(imp.get("modules_after_import") or []) or "none")
            + _pulled_in(imp.get("imported_by_pynumabind") or []),
        ]
    ]
    for key, label, what in (
        ("cold", "cold", "fresh interpreter"),
        (
            "cold_preloaded",
            "cold, stdlib preloaded",
            "fresh interpreter that already loaded {preloaded}, as a torch worker has",
        ),
    ):
        cold = data.get("bind", {}).get(key)
        if cold is None:
            continue
        where = what.format(preloaded=", ".join(cold.get("preloaded") or []))
        if "bind" in cold:
            rows.append(
                [
                    f"`bind_current_process(0)` {label}: detect + plan + apply, no NVML",
                    _s(cold["bind"]),
                    f"{where}; first call, including the modules it loads "
                    f"(`import pynumabind` before it: {_s(cold.get('import'))})",
                ]
            )
            if "bind_modules_loaded" in cold:
                rows.append(
                    [
                        f"`bind_current_process(0)` {label}, modules already loaded",
                        _s(cold["bind_modules_loaded"]),
                        f"{where}; second call: detect + plan + apply run anew, "
                        "only the one-time imports are gone",
                    ]
                )
        else:
            rows.append(
                [f"`bind_current_process(0)` {label}", "n/a", cold.get("error", "not measured")]
            )
    for warm in data.get("bind", {}).get("warm", []):
        threads = warm.get("threads", "?")
        plural = "" if threads == 1 else "s"
        raw = warm.get("raw", {}).get("summary")
        if "apply" in warm:
            rows.append(
                [
                    f"`apply_plan()` warm, {threads} thread{plural}",
                    _s(warm["apply"]),
                    f"vs raw syscalls {_s(raw)}: {_ratio_text(warm['ratio'])}",
                ]
            )
        else:
            rows.append(
                [
                    "raw syscalls (setaffinity per thread, set_mempolicy), "
                    f"{threads} thread{plural}",
                    _s(raw),
                    "apply_plan unavailable: "
                    + str(warm.get("apply_unavailable", warm.get("error"))),
                ]
            )
    out += _table(["What", "Time", "Notes"], rows)
    out.append("")
    numactl = data.get("numactl", {})
    startup = data.get("startup", {})
    out += [
        f"Starting a process, bound to node {startup.get('node', 0)} (wall time per start):",
        "",
    ]
    commands = startup.get("commands", [])
    medians = {c["label"]: c["summary"]["median"] for c in commands if "summary" in c}
    srows: List[List[Any]] = []
    for command in commands:
        label = command["label"]
        if "summary" not in command:
            srows.append([f"`{label}`", "failed", command.get("error", "")[:120], "", ""])
            continue
        baseline = startup_baseline(label)
        added = ratio_cell = ""
        if baseline is not None and baseline in medians:
            mine, theirs = medians[label], medians[baseline]
            added = f"{mine - theirs:+.1f} ms vs `{baseline}`"
            ratio_cell = f"×{mine / theirs:.2f}"
        srows.append(
            [f"`{label}`", _s(command["summary"]), _range(command["summary"]), added, ratio_cell]
        )
    out += _table(["Command", "Median [IQR]", "Min–max", "Added (medians)", "Ratio"], srows)
    if any("pynumabind exec" in c["label"] for c in commands):
        out += [
            "",
            "`pynumabind exec` starts two interpreters (its own, then the command it execs); "
            "in-process binding starts one.",
        ]
    if not numactl.get("available", False):
        out += ["", f"numactl unavailable: {numactl.get('status', 'unknown')}."]
    ratios = startup.get("ratios", [])
    if ratios:
        out += ["", "Ratios of medians [quartile range]:", ""]
        out += [f"- `{r['numerator']}` / `{r['denominator']}`: {_ratio_text(r)}" for r in ratios]
    out.append("")
    return out


def _yes_no(imported: Optional[bool]) -> str:
    return {True: "IMPORTED", False: "not imported", None: "unknown"}[imported]


def _pulled_in(modules: List[Dict[str, Any]]) -> str:
    """The standard-library modules the import pulled in (not loaded by ``site`` already)."""
    if not modules:
        return ""
    top = ", ".join(f"{m['module']} {m['self_ms']:.2g} ms" for m in modules[:4])
    return f"; pulled in (self time): {top}"


def startup_baseline(label: str) -> Optional[str]:
    """What a start-up command is compared with: the same program started bare."""
    if label in ("true", "python -c pass"):
        return None
    return "python -c pass" if "python" in label else "true"


def _advise_md(data: Dict[str, Any]) -> List[str]:
    out = ["### Memory and host<->GPU copies per NUMA node (`pynumabind advise`)", ""]
    if "text" not in data:
        return [*out, f"Failed: {data.get('error')}", ""]
    return [*out, "```", data["text"], "```", ""]


def _jitter_md(data: Dict[str, Any]) -> List[str]:
    out = [
        "### Jitter",
        "",
        f"{data.get('iterations')} iterations of a fixed CPU-bound loop (C); the bound worker owns "
        f"CPU {data.get('worker_cpu')}; load: {data.get('load')} "
        f"({', '.join(map(str, data.get('load_cpus', []))) or 'none'}).",
        "",
    ]
    if data.get("note"):
        out += [data["note"], ""]
    rows: List[List[Any]] = []
    for run in data.get("runs", []):
        if "summary" not in run:
            rows.append([run["name"], run.get("error", "failed"), "", "", "", "", ""])
            continue
        s = run["summary"]
        rows.append(
            [
                run["name"],
                _s(s),
                f"{s['p99']:.3g}",
                f"{s['max']:.3g}",
                f"{run['cv']:.3f}" if run.get("cv") is not None else "",
                run.get("migrations", ""),
                ",".join(map(str, run.get("cpus_used", []))),
            ]
        )
    out += _table(
        ["Run", "Iteration [IQR]", "p99 (us)", "max (us)", "CV", "Migrations", "CPUs"], rows
    )
    out.append("")
    return out


def _firsttouch_md(data: Dict[str, Any]) -> List[str]:
    failed = _error_md("### First touch", data)
    if failed is not None:
        return failed
    out = [
        "### First touch",
        "",
        f"{data['bytes'] >> 20} MiB on node {data['node']}, {data['rounds']} rounds; the prefault "
        f"ran {data['threads']} thread(s) on CPUs {','.join(map(str, data['cpus']))}. "
        f"{data.get('note', '')}.",
        "",
    ]
    rows = []
    for key, label in (
        ("plain", "plain touch (one thread, one write per page)"),
        ("prefault", "bound, parallel prefault (mbind + prefault)"),
        ("host_buffer", "host_buffer end to end (+ mapping, census)"),
    ):
        summary = Summary.from_dict(data["summaries"][key])
        if summary.median >= 1000:  # ms -> s
            summary = summary.scaled(1e-3, "s")
        spread = f"{summary.min:.3g}–{summary.max:.3g}"
        rows.append([label, summary.text(3), spread])
    out += _table(["Touch", "Time [IQR]", "min–max"], rows)
    verdict = "a clear difference" if data.get("clear") else "not clearly different"
    out += ["", f"Plain / prefault: {_ratio_text(data['ratio'])} ({verdict}).", ""]
    return out


# ----------------------------------------------------------------- plots


def render_plots(results: Dict[str, Any], directory: str) -> List[str]:
    """Write PNG plots; returns their paths.  Needs matplotlib (the ``bench`` extra)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: List[str] = []
    benches = results.get("benchmarks", {})
    virt = results.get("virtualization", {})
    if virt.get("emulated"):
        verdict = "QEMU TCG guest: numbers meaningless"
    elif virt.get("virtualized"):
        verdict = "VM: numbers indicative only"
    else:
        verdict = "bare metal"
    subtitle = f"{results.get('machine', {}).get('cpu_model', '?')} — {verdict}"

    def bars(
        ax: Any,
        labels: List[str],
        summaries: List[Dict[str, Any]],
        unit: str,
        colors: Optional[List[str]] = None,
    ) -> None:
        y = list(range(len(labels)))
        medians = [s["median"] for s in summaries]
        low = [s["median"] - s["q1"] for s in summaries]
        high = [s["q3"] - s["median"] for s in summaries]
        ax.barh(y, medians, xerr=[low, high], color=colors or "#4c72b0", alpha=0.85, capsize=4)
        ax.scatter([s["min"] for s in summaries], y, marker="|", color="black", s=80, zorder=3)
        ax.scatter([s["max"] for s in summaries], y, marker="|", color="black", s=80, zorder=3)
        ax.set_yticks(y)
        ax.set_yticklabels(labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel(f"{unit} (bar: median, error bar: IQR, ticks: min/max)")
        ax.grid(axis="x", alpha=0.3)

    scaling = [m for m in benches.get("scaling", {}).get("machines", []) if m.get("modes")]
    if scaling:
        fig, ax = plt.subplots(figsize=(8, 5.5))
        for mode in benches["scaling"].get("modes", []):
            chosen = [m for m in scaling if mode in m["modes"]]
            xs = [m["cpus"] for m in chosen]
            totals = [m["modes"][mode]["total"] for m in chosen]
            ax.errorbar(
                xs,
                [t["median"] for t in totals],
                yerr=[
                    [t["median"] - t["q1"] for t in totals],
                    [t["q3"] - t["median"] for t in totals],
                ],
                marker="o",
                capsize=3,
                label=f"{mode}: detect + plan",
            )
        first = benches["scaling"].get("modes", [""])[0]
        detect = [m for m in scaling if first in m["modes"]]
        ax.plot(
            [m["cpus"] for m in detect],
            [m["modes"][first]["detect"]["median"] for m in detect],
            linestyle=":",
            color="black",
            label=f"detect alone ({first} mode)",
        )
        ax.axhline(5.0, color="darkred", linestyle="--", linewidth=0.8)
        ax.text(2, 5.4, "target: from_sysfs ≤ 5 ms on 224 CPUs", fontsize=8, color="darkred")
        dgx = {r["key"]: r for r in benches.get("targets", {}).get("rows", [])}.get(
            "from_sysfs_dgx_h100", {}
        )
        if "summary" in dgx:
            ax.plot(
                [224],
                [dgx["summary"]["median"]],
                marker="*",
                markersize=12,
                linestyle="none",
                color="darkred",
                label="from_sysfs, DGX H100 fixture (224 CPUs; targets suite)",
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        sizes = sorted({m["cpus"] for m in scaling})
        ax.set_xticks(sizes)
        ax.set_xticklabels([f"{n:,}" for n in sizes])
        ax.minorticks_off()
        ax.set_xlabel("CPUs in the generated sysfs tree (log)")
        ax.set_ylabel("ms (log; median, error bar: IQR)")
        ax.set_title(f"Detect + plan against machine size\n{subtitle}", fontsize=10)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
        fig.tight_layout()
        written.append(_save(fig, directory, "scaling.png"))
        plt.close(fig)

    thread_runs = [r for r in benches.get("threads", {}).get("runs", []) if "apply" in r]
    if thread_runs:
        fig, ax = plt.subplots(figsize=(8, 5))
        xs = [r["threads"] for r in thread_runs]
        for key, label in (("apply", "apply_plan"), ("raw", "raw syscalls (ctypes)")):
            values = [r[key] for r in thread_runs]
            ax.errorbar(
                xs,
                [v["median"] for v in values],
                yerr=[
                    [v["median"] - v["q1"] for v in values],
                    [v["q3"] - v["median"] for v in values],
                ],
                marker="o",
                capsize=3,
                label=label,
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(xs)
        ax.set_xticklabels([f"{n:,}" for n in xs])
        ax.minorticks_off()
        ax.set_xlabel("threads alive in the process (log)")
        ax.set_ylabel("us per apply (log; median, error bar: IQR)")
        ax.set_title(f"Apply time against threads\n{subtitle}", fontsize=10)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
        fig.tight_layout()
        written.append(_save(fig, directory, "threads.png"))
        plt.close(fig)

    overhead = benches.get("overhead", {})
    commands = [c for c in overhead.get("startup", {}).get("commands", []) if "summary" in c]
    if commands:
        fig, ax = plt.subplots(figsize=(10, 0.55 * len(commands) + 1.6))
        bars(ax, [c["label"] for c in commands], [c["summary"] for c in commands], "ms")
        ax.set_title(
            f"Process start: numactl wrappers vs in-process binding\n{subtitle}", fontsize=10
        )
        fig.tight_layout()
        written.append(_save(fig, directory, "overhead.png"))
        plt.close(fig)

    advice = benches.get("advise", {}).get("advice")
    if advice:
        from pynumabind.cli._advise import write_plot

        path = os.path.join(directory, "advise.png")
        write_plot(advice, path)
        written.append(path)

    jitter = benches.get("jitter", {})
    runs = [r for r in jitter.get("runs", []) if r.get("samples")]
    if runs:
        fig, ax = plt.subplots(figsize=(10, 5))
        for run in runs:
            values = sorted(run["samples"])
            n = len(values)
            ax.plot(
                values,
                [1 - i / n for i in range(n)],
                label=run["name"],
                linestyle="-" if run["bound"] else "--",
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("iteration time (us, log)")
        ax.set_ylabel("fraction of iterations slower (log)")
        ax.set_title(f"Jitter: tail of iteration times\n{subtitle}", fontsize=10)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
        fig.tight_layout()
        written.append(_save(fig, directory, "jitter.png"))
        plt.close(fig)

    return written


def _save(fig: Any, directory: str, name: str) -> str:
    path = os.path.join(directory, name)
    fig.savefig(path, dpi=110)
    return path


def write_reports(results: Dict[str, Any], directory: str) -> List[str]:
    """results.md always; PNGs when matplotlib is importable (else a note in the list)."""
    os.makedirs(directory, exist_ok=True)
    md_path = os.path.join(directory, "results.md")
    with open(md_path, "w", encoding="utf-8") as handle:
        handle.write(render_markdown(results))
    written = [md_path]
    try:
        written += render_plots(results, directory)
    except ImportError as exc:
        written.append(f"(no PNG plots: {exc}; install the 'bench' extra)")
    return written
