"""CPU caches from a sysfs tree: L3 groups, and the size of a CPU set's last-level caches (shell).

``devices/system/cpu/cpuN/cache/indexM/`` describes one cache of CPU N:
its ``level``, ``type`` (``Data``, ``Instruction``, ``Unified``), ``size``
(``32768K``) and the CPUs sharing it (``shared_cpu_list``).  Two questions
are asked of these files, each answered here only:

* which CPUs share a CPU's unified level-3 cache (:func:`l3_group`, for the
  planner's cache groups; discovery asks once per group, three reads);
* how many bytes of last-level cache a set of CPUs has
  (:func:`llc_bytes`, so that ``advise``'s buffers stream from memory).

Every file is optional: a cache the kernel does not describe is unknown
(``None``), and a file that exists but cannot be read is a
:class:`~pynumabind.errors.TopologyError` naming it
(:class:`~pynumabind._os.textfile.SysfsReader`).
"""

from __future__ import annotations

from . import SYSFS_ROOT
from .textfile import SysfsReader, numbered

# typing is for type checkers only: a bind loads none of it (see pynumabind._record).
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Optional, Sequence, Tuple

__all__ = ["cache_size", "cpu_llc", "l3_group", "llc_bytes"]


def _cache_dir(cpu: int) -> Tuple[str, ...]:
    return ("devices", "system", "cpu", f"cpu{cpu}", "cache")


def l3_group(sysfs: SysfsReader, cpu: int, online: frozenset[int]) -> Optional[frozenset[int]]:
    """The online CPUs sharing ``cpu``'s unified level-3 cache; None when sysfs names none.

    ``index3`` is the L3 on every x86 and Arm server seen so far, so it is
    tried first (three reads per CPU); the other indices only when it is not.
    """
    base = _cache_dir(cpu)
    indices = numbered(sysfs.listdir(*base) or (), "index")
    if 3 in indices:
        indices.remove(3)
        indices.insert(0, 3)
    for index in indices:
        here = (*base, f"index{index}")
        level = sysfs.integer(*here, "level", required=False)
        if level != 3:
            continue
        kind = (sysfs.text(*here, "type", required=False) or "").strip()
        if kind == "Unified":
            shared = sysfs.cpulist(*here, "shared_cpu_list", required=False)
            if shared is not None:
                return shared & online
    return None


def cache_size(text: Optional[str]) -> Optional[int]:
    """A sysfs cache ``size`` in bytes: ``32768K``, ``1M``, ``512``; None when it is not one."""
    if text is None:
        return None
    value = text.strip().upper().rstrip("B")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(value[-1:], 1)
    digits = value[:-1] if value[-1:] in "KMG" else value
    return int(digits) * scale if digits.isascii() and digits.isdigit() else None


def cpu_llc(sysfs: SysfsReader, cpu: int) -> Optional[Tuple[int, frozenset[int]]]:
    """(size in bytes, CPUs sharing it) of ``cpu``'s highest-level data or unified cache."""
    base = _cache_dir(cpu)
    best: Optional[Tuple[int, int, frozenset[int]]] = None
    for index in numbered(sysfs.listdir(*base) or (), "index"):
        here = (*base, f"index{index}")
        level = sysfs.integer(*here, "level", required=False)
        kind = (sysfs.text(*here, "type", required=False) or "").strip()
        size = cache_size(sysfs.text(*here, "size", required=False))
        if level is None or size is None or kind == "Instruction":
            continue
        shared = sysfs.cpulist(*here, "shared_cpu_list", required=False) or frozenset()
        if best is None or (level, size) > best[:2]:
            best = (level, size, shared)
    return None if best is None else (best[1], best[2])


def llc_bytes(cpus: Sequence[int], root: str = SYSFS_ROOT) -> Optional[int]:
    """Sum of the distinct last-level caches of ``cpus``; None if sysfs describes none.

    Each CPU's highest-level data or unified cache counts (:func:`cpu_llc`);
    a cache shared by several of ``cpus`` counts once.
    """
    sysfs = SysfsReader(root)
    covered: set[int] = set()
    total = 0
    for cpu in sorted(cpus):
        if cpu in covered:
            continue
        found = cpu_llc(sysfs, cpu)
        if found is None:
            continue
        size, shared = found
        covered |= shared | {cpu}
        total += size
    return total or None
