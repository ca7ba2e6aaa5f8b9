"""Making the report: each section read from the machine, each failure kept in its section (shell).

Every fact is asked of the layer that owns it -- :mod:`pynumabind._os`
(libnuma, NVML, the cgroups, the kernel settings, nvidia-smi),
:mod:`pynumabind.discovery`, the planner, the check command's workers
(:mod:`pynumabind.cli._check`, the same code as ``pynumabind check``),
:func:`pynumabind.advise` -- and written with the CLI's own tables where
``show``, ``plan`` and ``check`` have them, so the report shows what those
commands show.  Nothing is decided here that a command decides elsewhere.

A section that raises is recorded as failed, with the exception and its
traceback, and the report goes on; Ctrl-C is not caught.  A section that
cannot apply is skipped with the reason: ``check`` and ``advise`` (and the
CUDA runtime) only run on this machine, not on a sysfs tree read from
elsewhere (:attr:`Settings.live`), and ``--no-check``/``--no-advise`` skip
them.  What the sections read is kept in :class:`~._checks.Facts`, from
which :func:`~._checks.cross_checks` derives the verdicts; what a failed or
skipped section would have given is ``None`` there, with the reason.

Messages the library logs meanwhile (``pynumabind`` logger, INFO and up)
are kept in the ``log`` section instead of going to the terminal.
"""

from __future__ import annotations

import datetime
import logging
import os
import platform
import socket
import sys
import traceback
from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..._os import SYSFS_ROOT
from ..._text import table
from ..._version import __version__
from ...cpulist import format_cpulist
from ...model import VISIBILITY_VARIABLES, CpuMode, Plan, Topology
from ...options import Options
from ._checks import CROSS_CHECKS, Facts, Limits, NvmlFacts, Record, SmiFacts
from ._document import FAILED, OK, SECTIONS, SKIPPED, Check, Report, Section
from ._layout import Layout
from ._redact import HOST, Redactor
from ._text import fit_table

__all__ = ["Settings", "build_report", "redact"]

#: Framework packages whose installed release the report names (never imported).
FRAMEWORKS = ("torch", "vllm", "sglang", "ray", "nvidia-ml-py", "cffi")

#: Variables a GPU job often sets that pynumabind does not read, shown for context.
CONTEXT_VARIABLES = ("NVIDIA_VISIBLE_DEVICES", "OMP_NUM_THREADS")

#: Most characters of nvidia-smi's output the JSON keeps.
SMI_OUTPUT_CHARS = 64 << 10


def _quiet(_line: str) -> None:
    pass


@dataclass(frozen=True)
class Settings:
    """What the report reads, and what it runs.

    ``sysfs_root`` other than ``/sys`` reads another machine's tree (tests:
    the recorded machines), with ``allowed_cpus``/``allowed_mems`` as that
    process's; then nothing is bound or measured here (:attr:`live` is
    false).  ``smi_path`` is the ``PATH`` nvidia-smi is looked up in
    (default: this process's).
    """

    sysfs_root: str = SYSFS_ROOT
    environ: Optional[Mapping[str, str]] = None
    use_nvml: bool = True
    check: bool = True
    advise: bool = True
    allowed_cpus: Optional[frozenset[int]] = None
    allowed_mems: Optional[frozenset[int]] = None
    smi_path: Optional[str] = None
    cuda_libraries: Optional[Sequence[str]] = None
    check_timeout: float = 60.0
    progress: Callable[[str], None] = _quiet

    @property
    def live(self) -> bool:
        return self.sysfs_root == SYSFS_ROOT

    @property
    def env(self) -> Mapping[str, str]:
        return os.environ if self.environ is None else self.environ


class _Skipped(Exception):
    """The section does not apply; the message says why."""


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("pynumabind: "):
            message = message[len("pynumabind: ") :]
        self.lines.append(f"{record.levelname}: {message}")


def _escaped(value: Optional[str]) -> str:
    """A variable's value as the report shows it: ``ascii()``, cut at 200 characters."""
    if value is None:
        return "unset"
    shown = ascii(value)
    return shown if len(shown) <= 200 else shown[:197] + "..."


def _rows(pairs: Sequence[Tuple[str, Any]]) -> List[List[str]]:
    return [[name, "-" if value is None else str(value)] for name, value in pairs]


def _installed(name: str) -> Optional[str]:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _ids(ids: Optional[frozenset[int]]) -> Optional[str]:
    return None if ids is None else format_cpulist(ids)


class _Gatherer:
    """One report's sections, in order, and the facts they leave for the cross-checks."""

    def __init__(self, settings: Settings, layout: Layout) -> None:
        self.settings = settings
        self.layout = layout
        self.facts = Facts()
        self.options: Optional[Options] = None

    # ---------------------------------------------------------- versions

    def versions(self) -> Tuple[Dict[str, Any], List[str]]:
        from ..._os import nvml as _nvml

        libnuma = self._libnuma()
        nvml: Dict[str, Any] = {"module": None, "driver": None, "nvml": None, "cuda_driver": None}
        try:
            found = _nvml.versions()
            nvml.update(module=found.module, driver=found.driver, nvml=found.nvml)
            nvml.update(cuda_driver=found.cuda_driver, notes=list(found.notes), reason=None)
        except _nvml.NvmlUnavailable as exc:
            nvml.update(notes=[], reason=exc.reason)
        cuda = self._cuda()
        frameworks = {name: _installed(name) for name in FRAMEWORKS}
        data = {
            "pynumabind": __version__,
            "python": platform.python_version(),
            "implementation": platform.python_implementation(),
            "executable": sys.executable,
            "kernel": os.uname().release,
            "machine": os.uname().machine,
            "libnuma": libnuma,
            "nvml": nvml,
            "cuda_runtime": cuda,
            "installed": frameworks,
        }
        driver = nvml["driver"] or f"unknown ({nvml.get('reason') or 'no answer'})"
        runtime = cuda.get("runtime") or f"unknown ({cuda.get('reason')})"
        if cuda.get("runtime") and cuda.get("reason"):
            runtime += f"; {cuda['reason']}"
        rows = _rows(
            [
                ("pynumabind", __version__),
                ("Python", f"{data['python']} ({data['implementation']}, {sys.executable})"),
                ("kernel", f"{data['kernel']} ({data['machine']})"),
                ("libnuma", self._libnuma_text(libnuma)),
                ("NVIDIA driver", driver),
                ("NVML", nvml["nvml"]),
                ("CUDA (driver)", nvml["cuda_driver"]),
                ("CUDA runtime", runtime),
                *[(name, frameworks[name] or "not installed") for name in FRAMEWORKS],
            ]
        )
        return data, fit_table(["component", "version"], rows)

    def _libnuma(self) -> Dict[str, Any]:
        from ..._os import libnuma as _libnuma
        from ..._os import proc as _proc
        from ...errors import LibnumaUnavailableError

        try:
            _libnuma.load()
        except LibnumaUnavailableError as exc:
            return {
                "soname": _libnuma.LIBRARY_NAME,
                "file": None,
                "available": False,
                "reason": str(exc),
            }
        return {
            "soname": _libnuma.LIBRARY_NAME,
            "file": _proc.mapped_file("libnuma"),
            "available": _libnuma.available(),
            "reason": None,
        }

    @staticmethod
    def _libnuma_text(libnuma: Dict[str, Any]) -> str:
        if libnuma["reason"]:
            return f"not loadable: {libnuma['reason']}"
        kernel = "" if libnuma["available"] else "; the kernel has no NUMA API"
        # libnuma has no call that names its release: the file loaded is what says it.
        return f"{libnuma['soname']} -> {libnuma['file'] or 'file not found in the maps'}{kernel}"

    def _cuda(self) -> Dict[str, Any]:
        if not self.settings.live:
            reason = f"not this machine (read from {self.settings.sysfs_root})"
            self.facts.missing["cuda"] = reason
            return {
                "library": None,
                "runtime": None,
                "driver": None,
                "devices": [],
                "reason": reason,
            }
        from ..._os.cudart import CUDART_NAMES
        from ...advisor import _copies

        names = self.settings.cuda_libraries or CUDART_NAMES
        cuda = _copies.cuda_runtime(names)
        self.facts.cuda = cuda
        return {
            "library": cuda.library,
            "runtime": cuda.runtime,
            "driver": cuda.driver,
            "devices": [{"ordinal": o, "pci_bus_id": bus} for o, bus in cuda.devices],
            "reason": cuda.reason,
        }

    # ----------------------------------------------------------- machine

    def machine(self) -> Tuple[Dict[str, Any], List[str]]:
        from ... import discovery
        from ..._os import kfd as _kfd
        from ..._os import nvml as _nvml
        from ..._os import pci as _pci

        settings, env = self.settings, self.settings.env
        allowed_cpus, allowed_mems = settings.allowed_cpus, settings.allowed_mems
        if settings.live:
            topology = discovery.resolve_topology(
                environ=env, use_nvml=settings.use_nvml, bind_here=True
            )
        else:
            topology = discovery.detect_topology(
                environ=env,
                use_nvml=settings.use_nvml,
                sysfs_root=settings.sysfs_root,
                allowed_cpus=allowed_cpus,
                allowed_mems=allowed_mems,
            )
        self.facts.topology = topology
        sysfs = discovery.topology_from_sysfs(
            settings.sysfs_root, allowed_cpus=allowed_cpus, allowed_mems=allowed_mems
        )
        self.facts.sysfs = sysfs
        asked, why = discovery.nvml_asked(
            sysfs, use_nvml=settings.use_nvml, sysfs_root=settings.sysfs_root
        )
        report, reason = None, None
        if asked:
            try:
                report = discovery.ask_nvml(sysfs, env)
            except _nvml.NvmlUnavailable as exc:
                reason = exc.reason
        self.facts.nvml = NvmlFacts(asked, why, report, reason)
        kfd = _kfd.read_kfd(settings.sysfs_root)
        from ...discovery._environ import topology_file

        snapshot = topology_file(env) if settings.live else None
        if not settings.live:
            source = f"the sysfs tree {settings.sysfs_root} (not this machine)"
        else:
            source = f"snapshot {snapshot} (PYNUMABIND_TOPOLOGY)" if snapshot else "this machine"
        data = {
            "source": source,
            "topology": topology.to_dict(),
            "warnings": self.layout.warnings(topology),
            "sysfs": {
                "root": settings.sysfs_root,
                "pci_functions_listed": _pci.lists_functions(settings.sysfs_root),
                "gpus": [self._sysfs_gpu(g) for g in sysfs.gpus],
            },
            "nvml": self._nvml_data(self.facts.nvml),
            "kfd": {"present": kfd is not None, "gpus": len(kfd or [])},
        }
        allowed_rows = [
            ["cpus", format_cpulist(topology.allowed_cpus) or "-"],
            ["mems", format_cpulist(topology.allowed_mems) or "-"],
        ]
        lines = [f"Read from: {data['source']}", "", *self.layout.node_tables(topology), ""]
        lines += [
            *self.layout.gpu_table(topology),
            "",
            "This process",
            table(["allowed", "set"], allowed_rows),
        ]
        lines += ["", "Sources", *self._source_lines(data, sysfs)]
        notes = [f"  - {w}" for w in data["warnings"]]
        if notes:
            lines += ["", "Warnings and discovery's notes", *notes]
        return data, "\n".join(lines).splitlines()

    @staticmethod
    def _sysfs_gpu(gpu: Any) -> Dict[str, Any]:
        return {
            "pci_bus_id": gpu.pci_bus_id,
            "vendor": gpu.vendor,
            "model": gpu.model,
            "numa_node": gpu.numa_node,
            "memory_node": gpu.memory_node,
            "local_cpus": format_cpulist(gpu.local_cpus),
        }

    @staticmethod
    def _nvml_data(nvml: NvmlFacts) -> Dict[str, Any]:
        report = nvml.report
        devices = [
            {
                "index": d.index,
                "pci_bus_id": d.pci_bus_id,
                "uuid": d.uuid,
                "name": d.name,
                "cpu_affinity": format_cpulist(d.cpu_affinity),
                "affinity_scope": d.affinity_scope,
                "memory_affinity": _ids(d.memory_affinity),
                "numa_node_id": d.numa_node_id,
                "notes": list(d.notes),
            }
            for d in (report.devices if report is not None else ())
        ]
        return {
            "asked": nvml.asked,
            "why": nvml.why,
            "reason": nvml.reason,
            "devices": devices,
            "denied": list(report.denied) if report is not None else [],
            "notes": list(report.notes) if report is not None else [],
        }

    @staticmethod
    def _source_lines(data: Dict[str, Any], sysfs: Topology) -> List[str]:
        found = data["sysfs"]
        gpus = ", ".join(f"{g.pci_bus_id} ({g.vendor}, node {g.numa_node})" for g in sysfs.gpus)
        listed = "lists PCI functions" if found["pci_functions_listed"] else "lists no PCI function"
        lines = [
            f"  sysfs ({found['root']}): {len(sysfs.nodes)} NUMA node(s); {listed}; "
            f"GPUs: {gpus or 'none'}"
        ]
        nvml = data["nvml"]
        said = f"  NVML: {nvml['why']}"
        if nvml["asked"]:
            said += (
                f"; unavailable: {nvml['reason']}"
                if nvml["reason"]
                else f"; {len(nvml['devices'])} GPU(s) opened, {len(nvml['denied'])} denied"
            )
        lines.append(said)
        lines += [f"    {note}" for note in nvml["notes"]]
        for device in nvml["devices"]:
            lines.append(
                f"    NVML GPU {device['index']} ({device['pci_bus_id']}): CPUs "
                f"{device['cpu_affinity'] or '-'} ({device['affinity_scope']} scope), memory "
                f"affinity {device['memory_affinity'] or '-'}, NUMA id "
                f"{'-' if device['numa_node_id'] is None else device['numa_node_id']}"
            )
        kfd = data["kfd"]
        lines.append(
            f"  KFD (AMD): {kfd['gpus']} GPU(s)" if kfd["present"] else "  KFD (AMD): not present"
        )
        by_source = ", ".join(f"GPU {g['index']}: {g['source']}" for g in data["topology"]["gpus"])
        lines.append(f"  each GPU's NUMA node came from: {by_source or 'no GPU'}")
        return lines

    # ------------------------------------------------------- environment

    def environment(self) -> Tuple[Dict[str, Any], List[str]]:
        from ...discovery._environ import RANK_VARIABLES, SIZE_VARIABLES

        env = self.settings.env
        launcher = [*RANK_VARIABLES, *[v for names in SIZE_VARIABLES.values() for v in names]]
        groups: Dict[str, Dict[str, Optional[str]]] = {
            "visibility": {name: env.get(name) for name in VISIBILITY_VARIABLES},
            "pynumabind": {
                name: env[name] for name in sorted(env) if name.startswith("PYNUMABIND_")
            },
            "launcher": {name: env.get(name) for name in launcher},
            "context": {name: env.get(name) for name in CONTEXT_VARIABLES},
        }
        rows = [
            [name, _escaped(value)] for group in groups.values() for name, value in group.items()
        ]
        if not groups["pynumabind"]:
            rows.append(["PYNUMABIND_*", "none set"])
        lines = [
            "Visibility, pynumabind's own, the launcher's, and context (NVIDIA_VISIBLE_DEVICES "
            "and OMP_NUM_THREADS are not read by pynumabind); values as Python's ascii() "
            "writes them",
            "",
            *fit_table(["variable", "value"], rows),
        ]
        return groups, lines

    # ------------------------------------------------------------ limits

    def limits(self) -> Tuple[Dict[str, Any], List[str]]:
        from ..._os import proc as _proc
        from ...errors import LibnumaUnavailableError, NumaSyscallError, ProcessStateError

        cpus = _proc.process_affinity()
        problems: List[str] = []
        try:
            mems: Optional[frozenset[int]] = _proc.mems_allowed()
        except (LibnumaUnavailableError, NumaSyscallError) as exc:
            mems = None
            problems.append(f"get_mempolicy: {exc}")
        try:
            status_mems: Optional[frozenset[int]] = _proc.status_mems_allowed()
            status_cpus: Optional[str] = _proc.status_field("Cpus_allowed_list")
        except ProcessStateError as exc:
            status_mems, status_cpus = None, None
            problems.append(str(exc))
        cgroups = _proc.cgroup_limits()
        self.facts.limits = Limits(cpus, mems, status_mems, cgroups)
        devices = cgroups.devices
        denied = sorted(self.facts.topology.denied_gpus) if self.facts.topology else []
        data = {
            "affinity": format_cpulist(cpus),
            "mems_allowed": _ids(mems),
            "status_cpus": status_cpus,
            "status_mems": _ids(status_mems),
            "cgroup": {
                "version": cgroups.version,
                "paths": dict(cgroups.paths),
                "cpuset_file": cgroups.cpuset_file,
                "cpuset_cpus": _ids(cgroups.cpuset_cpus),
                "cpuset_mems": _ids(cgroups.cpuset_mems),
                "devices": None
                if devices is None
                else {
                    "file": devices.path,
                    "everything": devices.everything,
                    "nvidia_gpus": format_cpulist(devices.nvidia_gpus),
                },
            },
            "nvml_denied_gpus": denied,
            "problems": problems,
        }
        return data, self._limit_lines(data)

    @staticmethod
    def _limit_lines(data: Dict[str, Any]) -> List[str]:
        cgroup = data["cgroup"]
        devices = cgroup["devices"]
        if devices is None:
            device_text = (
                "not readable (cgroup v2 filters devices with eBPF)"
                if cgroup["version"] == "v2"
                else "no v1 device controller"
            )
        elif devices["everything"]:
            device_text = f"every device ({devices['file']})"
        else:
            device_text = f"/dev/nvidia{devices['nvidia_gpus'] or '-'} ({devices['file']})"
        paths = ", ".join(
            f"{k or 'v2'}={v}"
            for k, v in sorted(cgroup["paths"].items())
            if k in ("", "cpuset", "devices")
        )
        rows = _rows(
            [
                ("CPU affinity (sched_getaffinity)", data["affinity"]),
                ("Cpus_allowed_list", data["status_cpus"]),
                ("memory nodes (get_mempolicy)", data["mems_allowed"]),
                ("Mems_allowed_list", data["status_mems"]),
                ("cgroup version", cgroup["version"]),
                ("cgroup paths", paths or "-"),
                ("cpuset CPUs", cgroup["cpuset_cpus"]),
                ("cpuset memory nodes", cgroup["cpuset_mems"]),
                ("cpuset file", cgroup["cpuset_file"]),
                ("device cgroup allows", device_text),
                ("GPUs NVML may not open", ", ".join(map(str, data["nvml_denied_gpus"])) or "none"),
            ]
        )
        return [*fit_table(["limit", "value"], rows), *[f"  - {p}" for p in data["problems"]]]

    # ------------------------------------------------------------ kernel

    def kernel(self) -> Tuple[Dict[str, Any], List[str]]:
        from ..._os import cpuinfo as _cpuinfo
        from ..._os import kernel as _kernel

        found = _kernel.settings()
        data = {
            "release": found.release,
            "version": found.version,
            "machine": found.machine,
            "numa_balancing": found.numa_balancing,
            "thp_enabled": found.thp_enabled,
            "thp_defrag": found.thp_defrag,
            "cpu_model": _cpuinfo.cpu_model(),
            "virtual_machine": _cpuinfo.hypervisor(),
            "problems": list(found.problems),
        }
        rows = _rows(
            [
                ("kernel", f"{found.release} {found.version}"),
                ("CPU model", data["cpu_model"]),
                ("virtual machine (hypervisor flag)", "yes" if data["virtual_machine"] else "no"),
                ("NUMA balancing", found.numa_balancing or "not in this kernel"),
                ("transparent huge pages", found.thp_enabled or "not in this kernel"),
                ("THP defrag", found.thp_defrag or "-"),
            ]
        )
        notes = []
        if found.numa_balancing and not found.numa_balancing.startswith("off"):
            notes.append(
                "  - NUMA balancing is on: the kernel may move a bound worker's pages later "
                "(binding.verify() can see pages elsewhere)"
            )
        return data, [
            *fit_table(["setting", "value"], rows),
            *notes,
            *[f"  - {p}" for p in found.problems],
        ]

    # ------------------------------------------------------------- plans

    def plans(self) -> Tuple[Dict[str, Any], List[str]]:
        from ...discovery._environ import resolve

        topology = self.facts.topology
        if topology is None:
            self.facts.missing["plans"] = "no topology (the machine section failed)"
            raise _Skipped("no topology: the machine section failed")
        env = self.settings.env
        options = resolve(env, Options.from_arguments(flags=True), need_rank=False)
        self.options = options
        given = [n for n in ("nodes", "cpus") if getattr(options, n) is not None]
        if given:
            self.facts.nodes_given = ", ".join(
                options.from_environment(n) or options.spelled(n) for n in given
            )
        results = self._plan(topology, options)
        self.facts.plans = results
        data: Dict[str, Any] = {
            "mode": options.cpu_mode.value,
            "default": [self._plan_dict(rank, r) for rank, r in enumerate(results)],
        }
        lines = [
            f"As `pynumabind plan` prints it (mode {options.cpu_mode.value}, from the "
            "environment's settings):",
            "",
            *"\n".join(self.layout.plan_text(results)).splitlines(),
        ]
        advised, advised_lines = self._advised(topology, options)
        data["advised"] = advised
        return data, [*lines, "", *advised_lines]

    @staticmethod
    def _plan_dict(rank: int, result: Any) -> Dict[str, Any]:
        if isinstance(result, Plan):
            return result.to_dict()
        return {"rank": rank, "error": str(result)}

    def _plan(self, topology: Topology, options: Options) -> List[Any]:
        """Each rank's plan or error, as ``pynumabind plan`` makes them (mode advised too)."""
        from ...planner import plan_each_for

        advised = None
        if options.cpu_mode is CpuMode.ADVISED:
            from ...records.store import resolve_advised

            advised = resolve_advised(options, topology, self.settings.env)
            options, topology = advised.options, advised.topology
        results: List[Any] = list(plan_each_for(topology, options))
        if advised is not None:
            results = [advised.finish(r) if isinstance(r, Plan) else r for r in results]
        return results

    def _advised(self, topology: Topology, options: Options) -> Tuple[Any, List[str]]:
        """Mode advised's plans when a record exists (and the default is not advised already)."""

        record = self._record()
        self.facts.record = record
        if record is None:
            return None, ["Mode advised: not this machine (a recorded sysfs tree)"]
        if record.path is None:
            looked = " or ".join(record.looked)
            return None, [f"Mode advised: no advice record ({looked}); nothing to follow"]
        if options.cpu_mode is CpuMode.ADVISED:
            return None, [f"Mode advised is the default above (advice record {record.path})"]
        advised_options = replace(options, mode=CpuMode.ADVISED, policy=None)
        results = self._plan(topology, advised_options)
        text = "\n".join(self.layout.plan_text(results)).splitlines()
        data = {
            "record": record.path,
            "ranks": [self._plan_dict(rank, r) for rank, r in enumerate(results)],
        }
        return data, [f"Mode advised, following the advice record {record.path}:", "", *text]

    def _record(self) -> Optional[Record]:
        if not self.settings.live:
            self.facts.missing["record"] = "not this machine (a recorded sysfs tree)"
            return None
        from ...errors import AdviceRecordError
        from ...records import store

        env = self.settings.env
        looked = tuple(store.read_paths(env))
        path = next((p for p in looked if os.path.lexists(p)), None)
        if path is None:
            return Record(None, looked)
        try:
            record = store.load_record(path, environ=env)
            differences = store.staleness(record.machine, store.this_machine())
        except AdviceRecordError as exc:
            return Record(path, looked, problem=str(exc))
        return Record(path, looked, tuple(differences))

    # -------------------------------------------------------- nvidia-smi

    def nvidia_smi(self) -> Tuple[Dict[str, Any], List[str]]:
        from ..._os import nvidia_smi as _smi

        run = _smi.run_topology(search_path=self.settings.smi_path)
        data: Dict[str, Any] = {
            "tool": run.tool,
            "seconds": round(run.seconds, 3),
            "reason": run.reason,
            "output": None if run.text is None else run.text[:SMI_OUTPUT_CHARS],
            "columns": [],
            "gpus": [],
        }
        if run.text is None:
            self.facts.smi = SmiFacts(None, run.reason)
            return data, [f"not run: {run.reason}"]
        try:
            parsed = _smi.parse_topology(run.text)
        except ValueError as exc:
            self.facts.smi = SmiFacts(None, f"{run.tool} topo -m: cannot read its output: {exc}")
            data["reason"] = str(exc)
            return data, [f"{run.tool}: cannot read its output ({exc}); it is in the JSON form"]
        self.facts.smi = SmiFacts(parsed)
        data["columns"] = list(parsed.columns)
        data["gpus"] = [
            {
                "index": g.index,
                "cpu_affinity": _ids(g.cpu_affinity),
                "numa_affinity": _ids(g.numa_affinity),
                "gpu_numa_id": g.gpu_numa_id,
                "problem": g.problem,
            }
            for g in parsed.gpus
        ]
        rows = [
            [
                f"GPU{g['index']}",
                g["cpu_affinity"] or "-",
                g["numa_affinity"] or "N/A",
                "N/A" if g["gpu_numa_id"] is None else str(g["gpu_numa_id"]),
                g["problem"] or "",
            ]
            for g in data["gpus"]
        ]
        headers = ["gpu", "CPU Affinity", "NUMA Affinity", "GPU NUMA ID", "problem"]
        lines = [
            f"{run.tool} topo -m ({run.seconds:.1f} s); its affinity columns as read (the whole "
            "table is in the JSON form):",
            "",
            *fit_table(headers, rows),
        ]
        return data, lines

    # ------------------------------------------------------------- check

    def check(self) -> Tuple[Dict[str, Any], List[str]]:
        from .._check import run_check

        settings = self.settings
        if not settings.check:
            self.facts.missing["check"] = "skipped (--no-check)"
            raise _Skipped("--no-check")
        if not settings.live:
            self.facts.missing["check"] = "not this machine"
            raise _Skipped(f"the machine was read from {settings.sysfs_root}: nothing to bind here")
        topology, options = self.facts.topology, self.options
        if topology is None or options is None:
            self.facts.missing["check"] = "no plans to check (their section failed)"
            raise _Skipped("no plans to check: the plans section failed")
        settings.progress("check: one worker process per rank binds and verifies itself")
        report = run_check(topology, options, timeout=settings.check_timeout, pass_topology=False)
        self.facts.check = report
        note = self.layout.check_note(topology, options, len(report.workers))
        return report.to_dict(), self.layout.check_text(report, note).splitlines()

    # ------------------------------------------------------------ advise

    def advise(self) -> Tuple[Dict[str, Any], List[str]]:
        settings = self.settings
        if not settings.advise:
            raise _Skipped("--no-advise")
        if not settings.live:
            raise _Skipped(f"the machine was read from {settings.sysfs_root}: nothing to measure")
        from ...advisor import advise
        from ...records.report import render_text

        settings.progress("advise --quick: measuring (about 15 s on two nodes)")
        advice = advise(quick=True, progress=lambda line: settings.progress(f"advise: {line}"))
        return advice.to_dict(), render_text(advice).splitlines()


#: The facts each section leaves for the cross-checks (by :class:`~._checks.Facts` field).
_PROVIDES = {
    "versions": ("cuda",),
    "machine": ("topology", "sysfs", "nvml"),
    "limits": ("limits",),
    "plans": ("plans", "record"),
    "nvidia_smi": ("nvidia_smi",),
    "check": ("check",),
}


def _section(name: str, make: Callable[[], Tuple[Dict[str, Any], List[str]]]) -> Section:
    """``make``'s section; a failure is kept in it, with its traceback (Ctrl-C is not)."""
    try:
        data, lines = make()
    except _Skipped as exc:
        return Section(name, SKIPPED, reason=str(exc))
    except Exception as exc:  # the report goes on: a failed section says why
        where = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-8))
        return Section(name, FAILED, reason=f"{type(exc).__name__}: {exc}", traceback=where)
    return Section(name, OK, data, tuple(lines))


def _now() -> str:
    stamp = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    return stamp.isoformat().replace("+00:00", "Z")


def build_report(settings: Settings, layout: Layout) -> Report:
    """Every section of :data:`~._document.SECTIONS`, then the cross-checks."""
    gatherer = _Gatherer(settings, layout)
    logger = logging.getLogger("pynumabind")
    capture = _Capture()
    saved = (logger.handlers[:], logger.level, logger.propagate)
    logger.handlers[:] = [capture]
    logger.setLevel(logging.INFO)
    logger.propagate = False
    sections: List[Section] = []
    try:
        for name, title in SECTIONS:
            if name == "log":
                continue
            settings.progress(title)
            sections.append(_section(name, getattr(gatherer, name)))
    finally:
        logger.handlers[:], logger.level, logger.propagate = saved[0], saved[1], saved[2]
    logged = tuple(capture.lines) or ("(nothing logged)",)
    sections.append(Section("log", OK, {"records": capture.lines}, logged))
    missing = gatherer.facts.missing
    for section in sections:
        if section.status == OK:
            continue
        for fact in _PROVIDES.get(section.name, (section.name,)):
            missing.setdefault(
                fact, f"the {section.name} section {section.status}: {section.reason}"
            )
    checks, failed = _cross_checks(gatherer.facts)
    if failed:  # the log section keeps each failed cross-check's traceback
        records = [*capture.lines]
        records += [
            f"ERROR: cross-check {name} failed:\n{where.rstrip()}" for name, where in failed
        ]
        lines = tuple("\n".join(records).splitlines())
        sections[-1] = Section("log", OK, {"records": records}, lines)
    return Report(
        version=__version__,
        created=_now(),
        host=socket.gethostname(),
        sections=tuple(sections),
        checks=tuple(checks),
        failed_checks=tuple(f"{name}: {where.rstrip().splitlines()[-1]}" for name, where in failed),
    )


def _cross_checks(facts: Facts) -> Tuple[List[Check], List[Tuple[str, str]]]:
    """Every cross-check's verdicts; one that raises is kept as (name, traceback), not lost."""
    checks: List[Check] = []
    failed: List[Tuple[str, str]] = []
    for name, verdicts in CROSS_CHECKS:
        try:
            checks.extend(verdicts(facts))
        except Exception as exc:  # the report goes on: a check that failed says why
            where = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-8)
            failed.append((name, "".join(where)))
    return checks, failed


def redact(report: Report, *, home: Optional[str] = None) -> Report:
    """``report`` with host names, UUIDs and serials replaced (:mod:`._redact`)."""
    hosts = [report.host, os.uname().nodename, socket.gethostname()]
    redactor = Redactor(hosts, home if home is not None else os.path.expanduser("~"))
    for section in report.sections:
        redactor.learn([section.data, list(section.lines), section.reason, section.traceback])
    redactor.learn([[c.subject, c.detail] for c in report.checks])
    text = redactor.text
    sections = tuple(
        Section(
            s.name,
            s.status,
            redactor.document(s.data),
            tuple(redactor.lines(s.lines)),
            None if s.reason is None else text(s.reason),
            None if s.traceback is None else text(s.traceback),
        )
        for s in report.sections
    )
    checks = tuple(
        replace(c, subject=text(c.subject), detail=text(c.detail)) for c in report.checks
    )
    return replace(report, host=HOST, sections=sections, checks=checks, redacted=True)
