"""The kernel's weighted-interleave weights: read, and written only when asked (shell).

``MPOL_WEIGHTED_INTERLEAVE`` (Linux 6.9) spreads a process's or a thread's
pages in proportion to weights the kernel keeps for the whole machine, one
per memory node, in ``kernel/mm/mempolicy/weighted_interleave/nodeN`` of
sysfs (1 to 255).  Mainline Linux has no per-task weights (a
``set_mempolicy2`` series with per-task weights was proposed and not
merged), so these are the weights every weighted policy uses, whoever set
it; a buffer's exact weights are pynumabind's own runs
(:func:`pynumabind._weights.weighted_runs`), which need none of this.

* Since Linux 6.16 an ``auto`` file says whether the kernel derives the
  weights from the firmware's bandwidth figures (``true``) or keeps what was
  written (``false``); writing a node's weight switches it to ``false``.
  Kernels built with C23's ``auto`` keyword defined as a macro show the file
  as ``__auto_type`` (seen on Linux 6.18): both names are read.
* Before 6.9 the folder does not exist: :func:`read_weights` returns None.
  A node without a file has the kernel's default weight, 1.
* Reading an existing file that cannot be read or parsed is a
  :class:`~pynumabind.errors.TopologyError` naming it
  (:class:`~pynumabind._os.textfile.SysfsReader`).
* :func:`write_weights` changes them for every process on the machine:
  root only (the files are ``0644``), and only on an explicit opt-in
  (``set_system_weights=True``).  It reads what was there first, writes each
  node, and where a write fails puts back the nodes it had written before
  raising :class:`~pynumabind.errors.NumaSyscallError` with the errno.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from typing import AbstractSet, Dict, Mapping, Optional

from ..errors import NumaSyscallError, TopologyError
from . import SYSFS_ROOT
from .textfile import SysfsReader, numbered

__all__ = ["AUTO_FILES", "WEIGHTS_DIR", "SystemWeights", "read_weights", "write_weights"]

#: The folder of the weights, relative to the sysfs root.
WEIGHTS_DIR = ("kernel", "mm", "mempolicy", "weighted_interleave")
#: The names of the ``auto`` switch (see the module docstring).
AUTO_FILES = ("auto", "__auto_type")


@dataclass(frozen=True)
class SystemWeights:
    """The kernel's weights as sysfs shows them.

    ``weights``: node -> weight for every ``nodeN`` file; ``auto``: whether
    the kernel derives them itself (None: no such switch, before 6.16);
    ``folder``: where they were read.
    """

    weights: Mapping[int, int] = field(hash=False)
    auto: Optional[bool]
    folder: str

    def for_nodes(self, nodes: AbstractSet[int]) -> Dict[int, int]:
        """The weight of each of ``nodes`` (1, the kernel's default, where it shows none)."""
        return {n: self.weights.get(n, 1) for n in sorted(nodes)}

    def described(self) -> str:
        """``the kernel's system-wide weights (auto)`` or ``(set by hand)``: how they came."""
        if self.auto is None:
            return "the kernel's system-wide weights"
        how = "derived by the kernel (auto)" if self.auto else "set by hand (auto off)"
        return f"the kernel's system-wide weights, {how}"


def _auto(sysfs: SysfsReader) -> Optional[bool]:
    for name in AUTO_FILES:
        text = sysfs.text(*WEIGHTS_DIR, name, required=False)
        if text is not None:
            value = text.strip()
            if value not in ("true", "false"):
                raise TopologyError(
                    f"malformed value {value!r} in {sysfs.path(*WEIGHTS_DIR, name)} "
                    "(expected true or false)"
                )
            return value == "true"
    return None


def read_weights(root: str = SYSFS_ROOT) -> Optional[SystemWeights]:
    """The kernel's weights; None where it has none (before Linux 6.9, or no NUMA)."""
    sysfs = SysfsReader(root)
    names = sysfs.listdir(*WEIGHTS_DIR)
    if names is None:
        return None
    weights: Dict[int, int] = {}
    for node in numbered(names, "node"):
        value = sysfs.integer(*WEIGHTS_DIR, f"node{node}", required=False)
        if value is not None:
            weights[node] = value
    return SystemWeights(weights, _auto(sysfs), sysfs.path(*WEIGHTS_DIR))


def _write(path: str, value: object) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, f"{value}\n".encode("ascii"))
    finally:
        os.close(fd)


def write_weights(weights: Mapping[int, int], root: str = SYSFS_ROOT) -> SystemWeights:
    """Set the kernel's weight of each node of ``weights``; returns the weights before.

    Changes every process's weighted interleave on the machine (see the
    module docstring).  All or nothing, as far as the kernel lets it: a
    failed write puts back the nodes written before it, then raises
    :class:`~pynumabind.errors.NumaSyscallError` (``EACCES``/``EPERM``: not
    root; ``ENOENT``: no such weight here; ``EINVAL``: the kernel refused the
    value).  An interrupt during the writes puts them back too.
    """
    before = read_weights(root)
    if before is None:
        folder = os.path.join(root, *WEIGHTS_DIR)
        raise NumaSyscallError(errno.ENOENT, f"writing the weights in {folder} (Linux < 6.9?)")
    written: Dict[int, int] = {}
    try:
        for node, value in sorted(weights.items()):
            path = os.path.join(before.folder, f"node{node}")
            try:
                _write(path, value)
            except OSError as exc:
                raise NumaSyscallError(exc.errno or errno.EIO, f"writing {path}", {node}) from exc
            written[node] = before.weights.get(node, 1)
    except BaseException:
        _put_back(before, written)
        raise
    return before


def _put_back(before: SystemWeights, written: Mapping[int, int]) -> None:
    """Best effort: the nodes written, and ``auto`` where it was on (writing turned it off)."""
    targets = [(f"node{node}", str(value)) for node, value in written.items()]
    if written and before.auto:
        names = [n for n in AUTO_FILES if os.path.exists(os.path.join(before.folder, n))]
        targets += [(name, "true") for name in names[:1]]
    for name, value in targets:
        try:
            _write(os.path.join(before.folder, name), value)
        except OSError:
            pass  # the error being raised says what failed first
