"""NVIDIA GPUs through NVML (the ``pynvml`` module of nvidia-ml-py).

NVML is what knows the driver's GPU order, the UUIDs CUDA_VISIBLE_DEVICES
may name, and on Grace machines the GPU's own memory node.  It is imported
and initialised only when :func:`query` runs, and shut down before it
returns, so ``import pynumabind`` never loads it and a worker does not keep
a handle open.

When NVML is missing (ImportError) or cannot start (library not found,
driver not loaded, ...) :func:`query` raises :class:`NvmlUnavailable` with
the reason; discovery then falls back to sysfs PCI scanning and records the
reason in ``Topology.notes``.

The nvidia-ml-py floor (``pyproject.toml``: ``nvidia-ml-py>=12.550.52``,
:data:`NVML_PY_FLOOR`) is the first release with an
``nvmlDeviceGetNumaNodeId`` wrapper, the only call that names a Grace/GB200
GPU's own (CPU-less) memory node; 12.535.x lacks it.  The floor was raised
rather than the C symbol called through pynvml's loaded library because
nvidia-ml-py is pure Python whose every wrapper looks its C symbol up only
when called (a newer binding runs on an older driver: a symbol the driver
lacks is FunctionNotFound for that call alone), so the higher floor costs no
driver compatibility, while calling the symbol ourselves would mean reaching
into pynvml's private loader and re-declaring NVIDIA's ctypes prototypes.
A ``pynvml`` module that still lacks a wrapper (another distribution's
``pynvml.py``, a vendored copy) works: the call is skipped and one note
names the module, the missing wrapper and what it costs.

:func:`versions` (``pynumabind report`` asks it, no bind does) opens NVML
once more for the driver's version, NVML's and the CUDA version the driver
supports; each answer NVML cannot give is ``None``.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Type

from .._record import FACTORY, field, record
from .._record import replace as _replace
from ..cpulist import parse_cpumask
from ..errors import PynumabindError, TopologyError
from . import forksafe as _forksafe

__all__ = [
    "NVML_PY_FLOOR",
    "NvmlDevice",
    "NvmlReport",
    "NvmlUnavailable",
    "NvmlVersions",
    "binding_release",
    "forget",
    "query",
    "versions",
]

log = logging.getLogger(__name__)

#: The oldest nvidia-ml-py allowed (keep equal to pyproject.toml's floor).
NVML_PY_FLOOR = "12.550.52"

#: What is lost when the ``pynvml`` module in use lacks a wrapper.
_WITHOUT = {
    "nvmlDeviceGetNumaNodeId": "GPU memory nodes (Grace/GB200 HBM) are not asked of NVML",
    "nvmlDeviceGetCpuAffinityWithinScope": "CPU affinity is the socket-wide legacy mask",
    "nvmlDeviceGetMemoryAffinity": "NVML's memory affinity is not asked",
}


class NvmlUnavailable(PynumabindError):
    """NVML cannot be used here; ``reason`` says why (for notes)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@record(frozen=True)
class NvmlDevice:
    """What NVML says about one GPU (``index`` is NVML's).

    ``affinity_scope`` is ``"node"`` when ``cpu_affinity`` came from the
    node-scope call, ``"socket"`` when only the legacy call answered (its
    mask is socket-wide: several nodes under SNC/NPS).
    """

    index: int
    pci_bus_id: str
    uuid: Optional[str]
    name: Optional[str]
    cpu_affinity: frozenset[int]
    memory_affinity: Optional[frozenset[int]]
    numa_node_id: Optional[int]
    notes: Tuple[str, ...] = ()
    affinity_scope: str = "node"

    def __init__(  # noqa: PLR0917 - positional, as the dataclass's fields
        self,
        index: int,
        pci_bus_id: str,
        uuid: Optional[str],
        name: Optional[str],
        cpu_affinity: frozenset[int],
        memory_affinity: Optional[frozenset[int]],
        numa_node_id: Optional[int],
        notes: Tuple[str, ...] = (),
        affinity_scope: str = "node",
    ) -> None:
        self.__dict__.update(
            index=index,
            pci_bus_id=pci_bus_id,
            uuid=uuid,
            name=name,
            cpu_affinity=cpu_affinity,
            memory_affinity=memory_affinity,
            numa_node_id=numa_node_id,
            notes=notes,
            affinity_scope=affinity_scope,
        )


@record(frozen=True)
class NvmlReport:
    """Every GPU NVML lets this process open, and the indices of those it does not.

    ``denied`` are the NVML indices whose handle NVML refuses with
    NO_PERMISSION: a device cgroup (Slurm's ``ConstrainDevices``) denies them.
    CUDA does not count those, so visibility must not either.
    """

    devices: Tuple[NvmlDevice, ...]
    mig_parents: Dict[str, str] = field(default_factory=dict)
    notes: Tuple[str, ...] = ()
    denied: Tuple[int, ...] = ()

    def __init__(
        self,
        devices: Tuple[NvmlDevice, ...],
        mig_parents: Dict[str, str] = FACTORY,
        notes: Tuple[str, ...] = (),
        denied: Tuple[int, ...] = (),
    ) -> None:
        self.__dict__.update(
            devices=devices,
            mig_parents={} if mig_parents is FACTORY else mig_parents,
            notes=notes,
            denied=denied,
        )


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _mask(array: Any) -> frozenset[int]:
    return parse_cpumask([int(word) for word in array])


def _node_id(value: Any) -> Optional[int]:
    node = int(value)
    return node if node >= 0 else None


# ------------------------------------------------------- once per process


@record(frozen=True)
class _Answers:
    """What this process learnt from NVML (or why it cannot use it); a new one per change."""

    module: Any  # the pynvml module asked: another one (a test's fake) asks again
    failure: Optional[str] = None  # NvmlUnavailable's reason, when NVML cannot be used
    words: Tuple[int, int] = (0, 0)  # (cpu_words, node_words) the masks were asked with
    devices: Tuple[NvmlDevice, ...] = ()
    notes: Tuple[str, ...] = ()
    mig_parents: Dict[str, str] = field(default_factory=dict)
    mig_notes: Dict[str, str] = field(default_factory=dict)
    denied: Tuple[int, ...] = ()

    def __init__(  # noqa: PLR0917 - positional, as the dataclass's fields
        self,
        module: Any,
        failure: Optional[str] = None,
        words: Tuple[int, int] = (0, 0),
        devices: Tuple[NvmlDevice, ...] = (),
        notes: Tuple[str, ...] = (),
        mig_parents: Dict[str, str] = FACTORY,
        mig_notes: Dict[str, str] = FACTORY,
        denied: Tuple[int, ...] = (),
    ) -> None:
        self.__dict__.update(
            module=module,
            failure=failure,
            words=words,
            devices=devices,
            notes=notes,
            mig_parents={} if mig_parents is FACTORY else mig_parents,
            mig_notes={} if mig_notes is FACTORY else mig_notes,
            denied=denied,
        )

    def report(self, migs: Sequence[str]) -> NvmlReport:
        return NvmlReport(
            devices=self.devices,
            denied=self.denied,
            mig_parents={m: self.mig_parents[m] for m in migs if m in self.mig_parents},
            notes=self.notes + tuple(self.mig_notes[m] for m in migs if m in self.mig_notes),
        )


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.answers: Optional[_Answers] = None


_STATE = _State()


def forget() -> None:
    """Drop what this process learnt from NVML; the next :func:`query` asks again.

    Runs in every fork child (``os.register_at_fork``), with a fresh lock in
    case another thread of the parent held it at the fork.
    """
    _STATE.lock = threading.Lock()
    _STATE.answers = None


os.register_at_fork(after_in_child=forget)


def query(
    *,
    cpu_words: int = 16,
    node_words: int = 1,
    mig_uuids: Sequence[str] = (),
) -> NvmlReport:
    """Every GPU NVML enumerates, in NVML order.

    ``cpu_words``/``node_words`` size the 64-bit affinity arrays (at least
    ``ceil(max id + 1 / 64)``).  ``mig_uuids`` are ``MIG-<uuid>`` names to
    resolve to their parent GPU's UUID while NVML is open.

    NVML is initialised at most once per process for the devices: a later
    call with the same mask sizes returns what the first one learnt (the
    GPUs, their affinities and NUMA ids cannot change under a running
    process) without touching NVML, and one that names MIG devices not yet
    resolved opens NVML only to resolve those.  ``NvmlUnavailable`` is
    remembered too: a driver that is not there is not looked for again.
    What is remembered is keyed on the ``pynvml`` module object and the mask
    sizes, and dropped in a fork child (which may sit in another device
    cgroup, and must not inherit NVML state), or by :func:`forget`.
    """
    pynvml = _import()
    words = (max(1, cpu_words), max(1, node_words))
    migs = tuple(dict.fromkeys(mig_uuids))
    with _STATE.lock:
        known = _remembered(pynvml, words)
        todo = [m for m in migs if known is None or m not in known.mig_parents]
        todo = [m for m in todo if known is None or m not in known.mig_notes]
        if known is None or todo:
            known = _ask(pynvml, words, todo, known)
            _STATE.answers = known
        if known.failure is not None:
            raise NvmlUnavailable(known.failure)
        return known.report(migs)


def _remembered(pynvml: Any, words: Tuple[int, int]) -> Optional[_Answers]:
    """What an earlier :func:`query` learnt that still holds (call under the lock).

    Nothing when it asked another ``pynvml`` module or with other mask
    sizes; a remembered failure is raised again.
    """
    known = _STATE.answers
    if known is None or known.module is not pynvml:
        return None
    if known.failure is not None:
        raise NvmlUnavailable(known.failure)
    return known if known.words == words else None


def _import() -> Any:
    try:
        with _forksafe.lock():  # a fork waits for this first-use import (see forksafe)
            import pynvml
    except ImportError as exc:
        raise NvmlUnavailable(f"pynvml (nvidia-ml-py) is not importable: {exc}") from None
    except Exception as exc:  # a broken pynvml module: its import raised
        raise NvmlUnavailable(
            f"pynvml (nvidia-ml-py) failed to import: {exc} ({type(exc).__name__})"
        ) from None
    if pynvml is None:  # pragma: no cover - sys.modules entry blocked
        raise NvmlUnavailable("pynvml (nvidia-ml-py) is not importable")
    if not isinstance(getattr(pynvml, "NVMLError", None), type):
        where = getattr(pynvml, "__file__", None) or "?"
        raise NvmlUnavailable(f"the pynvml module at {where} is not nvidia-ml-py's (no NVMLError)")
    return pynvml


def _ask(
    pynvml: Any, words: Tuple[int, int], migs: Sequence[str], known: Optional[_Answers]
) -> _Answers:
    """Open NVML, ask what ``known`` lacks, shut NVML down.

    Every exception the binding raises (NVMLError, and anything else: ctypes,
    a decode error, a malformed answer) becomes ``NvmlUnavailable`` when it
    stops NVML from being used at all, and a note otherwise.
    """
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        reason = f"nvmlInit failed: {exc} ({type(exc).__name__})"
        if known is None:
            return _Answers(module=pynvml, failure=reason)
        mig_notes = dict(known.mig_notes)
        for mig in migs:
            mig_notes[mig] = f"NVML does not know MIG device {mig!r}: {reason}"
        return _replace(known, mig_notes=mig_notes)
    try:
        if known is None:
            try:
                known = _collect(pynvml, words)
            except NvmlUnavailable as exc:
                return _Answers(module=pynvml, failure=exc.reason)
        parents, mig_notes = dict(known.mig_parents), dict(known.mig_notes)
        for mig in migs:
            try:
                mig_handle = pynvml.nvmlDeviceGetHandleByUUID(mig)
                parent = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig_handle)
                parents[mig] = _text(pynvml.nvmlDeviceGetUUID(parent))
            except Exception as exc:
                mig_notes[mig] = f"NVML does not know MIG device {mig!r}: {_say(exc)}"
        return _replace(known, mig_parents=parents, mig_notes=mig_notes)
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception as exc:  # nothing to do about it
            log.debug("nvmlShutdown failed: %s", _say(exc))


def _say(exc: BaseException) -> str:
    """An NVML error as NVML words it; anything else with its type."""
    if type(exc).__name__.startswith("NVMLError"):
        return str(exc)
    return f"{exc} ({type(exc).__name__})"


class _Asker:
    """Per-device calls that may go unanswered, each answer converted.

    A wrapper the module lacks is noted once (``missing``); a C symbol the
    driver lacks (FunctionNotFound) is asked of the first GPU only
    (``absent``); NOT_SUPPORTED is a silent "no answer"; any other error,
    and an answer ``convert`` rejects, is a note on that GPU.
    """

    def __init__(self, pynvml: Any) -> None:
        self.pynvml = pynvml
        self.missing: List[str] = []
        self.absent: List[str] = []
        self.not_supported: Tuple[Type[BaseException], ...] = tuple(
            t for t in (getattr(pynvml, "NVMLError_NotSupported", None),) if isinstance(t, type)
        )
        self.not_found: Tuple[Type[BaseException], ...] = tuple(
            t for t in (getattr(pynvml, "NVMLError_FunctionNotFound", None),) if isinstance(t, type)
        )

    def ask(
        self,
        handle: Any,
        label: str,
        notes: List[str],
        call: str,
        convert: Callable[[Any], Any],
        *args: Any,
    ) -> Any:
        function = getattr(self.pynvml, call, None)
        if function is None:  # a pynvml older than the floor: noted once per report
            if call not in self.missing:
                self.missing.append(call)
            return None
        if call in self.absent:
            return None
        try:
            answer = function(handle, *args)
        except self.not_supported:
            return None
        except self.not_found:
            self.absent.append(call)
            return None
        except Exception as exc:
            notes.append(f"{label}: {call} failed: {_say(exc)}")
            return None
        try:
            return convert(answer)
        except (TypeError, ValueError, OverflowError) as exc:
            notes.append(f"{label}: {call} gave an unusable answer {answer!r} ({exc}); ignored")
            return None


def _collect(pynvml: Any, words: Tuple[int, int]) -> _Answers:
    cpu_words, node_words = words
    try:
        count = int(pynvml.nvmlDeviceGetCount())
    except Exception as exc:
        raise NvmlUnavailable(f"nvmlDeviceGetCount failed: {_say(exc)}") from None
    scope = getattr(pynvml, "NVML_AFFINITY_SCOPE_NODE", 0)
    asker = _Asker(pynvml)
    no_permission = getattr(pynvml, "NVMLError_NoPermission", None)
    devices: List[NvmlDevice] = []
    notes: List[str] = []
    denied: List[int] = []
    for index in range(count):
        call = "nvmlDeviceGetHandleByIndex"
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            call = "nvmlDeviceGetPciInfo"
            bus_id = _bus_id(pynvml.nvmlDeviceGetPciInfo(handle))
        except Exception as exc:
            if isinstance(no_permission, type) and isinstance(exc, no_permission):
                denied.append(index)
                continue
            notes.append(f"NVML GPU {index}: {call} failed ({_say(exc)}); skipped")
            continue
        here: List[str] = []
        label = f"NVML GPU {index} ({bus_id})"

        def ask(call: str, convert: Callable[[Any], Any], *args: Any) -> Any:
            return asker.ask(handle, label, here, call, convert, *args)  # noqa: B023

        cpus = ask("nvmlDeviceGetCpuAffinityWithinScope", _mask, cpu_words, scope)
        affinity_scope = "node"
        if cpus is None:
            cpus = ask("nvmlDeviceGetCpuAffinity", _mask, cpu_words)
            affinity_scope = "socket"
        devices.append(
            NvmlDevice(
                index=index,
                pci_bus_id=bus_id,
                uuid=ask("nvmlDeviceGetUUID", _text),
                name=ask("nvmlDeviceGetName", _text),
                cpu_affinity=cpus if cpus is not None else frozenset(),
                memory_affinity=ask("nvmlDeviceGetMemoryAffinity", _mask, node_words, scope),
                numa_node_id=ask("nvmlDeviceGetNumaNodeId", _node_id),
                notes=tuple(here),
                affinity_scope=affinity_scope,
            )
        )
    notes.extend(_missing_note(pynvml, call) for call in asker.missing)
    notes.extend(
        f"the driver's NVML has no {call} (FunctionNotFound): {_WITHOUT[call]}"
        for call in asker.absent
        if call in _WITHOUT
    )
    if denied:
        notes.append(
            f"NVML lists {count} GPUs but this process may not open GPU(s) "
            f"{', '.join(map(str, denied))} (NO_PERMISSION: a device cgroup, e.g. Slurm's "
            "ConstrainDevices); like CUDA, visible-device indices count only the others"
        )
    return _Answers(
        module=pynvml,
        words=words,
        devices=tuple(devices),
        notes=tuple(notes),
        denied=tuple(denied),
    )


def binding_release() -> Optional[str]:
    """The installed nvidia-ml-py's release (its metadata; ``pynvml`` is not imported)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nvidia-ml-py")
    except PackageNotFoundError:
        return None


def _missing_note(pynvml: Any, call: str) -> str:
    found = binding_release()
    release = "not from nvidia-ml-py" if found is None else f"nvidia-ml-py {found}"
    where = getattr(pynvml, "__file__", None) or "?"
    cost = _WITHOUT.get(call, "that answer is not asked")
    return (
        f"pynvml ({where}, {release}) has no {call} wrapper: {cost}; "
        f"install nvidia-ml-py>={NVML_PY_FLOOR}"
    )


def _bus_id(info: Any) -> str:
    from .pci import normalize_bus_id

    raw = getattr(info, "busId", None) or getattr(info, "busIdLegacy", None)
    if raw is None:
        raise TopologyError("NVML PCI info has no busId")
    return normalize_bus_id(_text(raw))


# ------------------------------------------------------------- versions


@record(frozen=True)
class NvmlVersions:
    """The versions NVML reports: each ``None`` when it gives no answer (``notes`` say why).

    ``cuda_driver`` is the newest CUDA version the driver supports
    (``12.4``), not a CUDA runtime's.
    """

    module: str
    driver: Optional[str] = None
    nvml: Optional[str] = None
    cuda_driver: Optional[str] = None
    notes: Tuple[str, ...] = ()

    def __init__(
        self,
        module: str,
        driver: Optional[str] = None,
        nvml: Optional[str] = None,
        cuda_driver: Optional[str] = None,
        notes: Tuple[str, ...] = (),
    ) -> None:
        self.__dict__.update(
            module=module, driver=driver, nvml=nvml, cuda_driver=cuda_driver, notes=notes
        )


def _cuda_version(value: Any) -> str:
    number = int(value)
    return f"{number // 1000}.{number % 1000 // 10}"


def versions() -> NvmlVersions:
    """Open NVML, ask for its versions, shut it down.

    Raises:
        NvmlUnavailable: ``pynvml`` does not import, or ``nvmlInit`` fails.
    """
    pynvml = _import()
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        raise NvmlUnavailable(f"nvmlInit failed: {_say(exc)}") from None
    answers: Dict[str, Optional[str]] = {}
    notes: List[str] = []
    calls = (
        ("driver", ("nvmlSystemGetDriverVersion",), _text),
        ("nvml", ("nvmlSystemGetNVMLVersion",), _text),
        (
            "cuda_driver",
            ("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"),
            _cuda_version,
        ),
    )
    try:
        for key, names, convert in calls:
            answers[key] = _first_answer(pynvml, names, convert, notes)
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception as exc:  # nothing to do about it
            log.debug("nvmlShutdown failed: %s", _say(exc))
    where = getattr(pynvml, "__file__", None) or "?"
    return NvmlVersions(module=where, notes=tuple(notes), **answers)


def _first_answer(
    pynvml: Any, names: Sequence[str], convert: Callable[[Any], str], notes: List[str]
) -> Optional[str]:
    """The first of ``names`` that this ``pynvml`` has and NVML answers; else a note."""
    for name in names:
        function = getattr(pynvml, name, None)
        if function is None:
            continue
        try:
            return convert(function())
        except Exception as exc:
            notes.append(f"{name} failed: {_say(exc)}")
            return None
    notes.append(f"this pynvml has none of {', '.join(names)}")
    return None
