"""The files of a sysfs tree: bounded reads, and the one translation of their errors (shell).

A ``--sysfs-root`` is any directory a user names, so its files are untrusted:
a FIFO would block ``open`` and ``read`` for good, ``/dev/zero`` never ends,
and bytes need not be ASCII.  Every attribute sysfs shows is a regular file
of at most a page, so only regular files are read, at most
:data:`MAX_FILE_BYTES` of each, as ASCII.  Anything else is a
:class:`~pynumabind.errors.TopologyError` naming the file; errors from
``open`` itself (missing file, permissions, EINVAL from the kernel) reach
the caller as ``OSError``, whose policy on optional files decides.  These
are files of the machine's layout; this process's own state (``/proc/self``,
its cgroup) is :mod:`.proc`'s to read.

:class:`SysfsReader` is that policy, once for every reader of a sysfs tree
(:mod:`.sysfs`, :mod:`.pci`, :mod:`.meminfo`, :mod:`.caches`,
:mod:`.hmat`): a missing optional file is ``None``, anything else a
:class:`~pynumabind.errors.TopologyError` naming the file.
:func:`read_head` reads the start of a file that may be long
(``/proc/cpuinfo``), never more than its limit.
"""

from __future__ import annotations

import errno
import os
import stat

from ..cpulist import parse_cpulist
from ..errors import ListParseError, TopologyError
from . import SYSFS_ROOT

# typing is for type checkers only: a bind loads none of it (see pynumabind._record).
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Iterable, List, Optional

__all__ = [
    "MAX_FILE_BYTES",
    "SysfsReader",
    "is_live_root",
    "numbered",
    "read_ascii",
    "read_fd",
    "read_head",
]

#: Far more than any sysfs attribute (a page) or KFD properties file holds.
MAX_FILE_BYTES = 1 << 20
_CHUNK = 8192  # two pages: one read returns a whole sysfs attribute


def read_fd(fd: int, limit: Optional[int] = None) -> Optional[bytes]:
    """What is left to read in ``fd``, in raw chunks; ``None`` once past ``limit`` bytes.

    Raw reads in small chunks, not a file object: a sysfs attribute is at
    most a page, and asking a buffered file for MAX_FILE_BYTES + 1 costs a
    megabyte's allocation per file (3x the whole read, measured); a text
    file object took twice as long for a thread's name in ``/proc``
    (:mod:`.proc` reads its files here too).  ``OSError`` reaches the caller.
    """
    chunks = []
    size = 0
    while True:
        chunk = os.read(fd, _CHUNK)
        if not chunk:
            break
        size += len(chunk)
        if limit is not None and size > limit:
            return None
        chunks.append(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def read_ascii(path: str, what: str = "sysfs file") -> str:
    """The text of the regular file ``path``; ``what`` names it in errors."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        if not stat.S_ISREG(mode):
            raise TopologyError(f"{what} {path} is not a regular file")
        data = read_fd(fd, MAX_FILE_BYTES)
    finally:
        os.close(fd)
    if data is None:
        raise TopologyError(f"{what} {path} is larger than {MAX_FILE_BYTES} bytes")
    try:
        return data.decode("ascii")
    except UnicodeDecodeError as exc:
        raise TopologyError(f"{what} {path} is not ASCII text (byte {exc.start})") from exc


def read_head(path: str, limit: int, what: str, *, until: bytes = b"\n\n") -> str:
    """The start of the regular file ``path``: up to the first ``until``, at most ``limit`` bytes.

    For a file whose first part is all a caller needs and whose whole may be
    long (``/proc/cpuinfo`` lists every CPU).  Bytes that are not ASCII are
    replaced, not refused: the text is searched, never parsed whole.
    Errors of ``open`` reach the caller as ``OSError``, as in :func:`read_ascii`.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise TopologyError(f"{what} {path} is not a regular file")
        data = b""
        while len(data) < limit and until not in data:
            chunk = os.read(fd, min(_CHUNK, limit - len(data)))
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    end = data.find(until)
    return (data if end < 0 else data[:end]).decode("ascii", errors="replace")


def is_live_root(root: str) -> bool:
    """Whether ``root`` is this machine's own sysfs (:data:`~pynumabind._os.SYSFS_ROOT`)."""
    if root == SYSFS_ROOT:  # the default: no realpath (two lstat walks) on every bind
        return True
    return os.path.realpath(root) == os.path.realpath(SYSFS_ROOT)  # realpath does not raise


def numbered(names: Iterable[str], prefix: str) -> List[int]:
    """Ids of entries named ``<prefix><digits>`` (``node3``, ``cpu17``), in ascending order.

    ASCII digits only: ``str.isdigit`` also accepts ``index²``, which
    ``int`` then rejects.
    """
    out = []
    for name in names:
        digits = name[len(prefix) :]
        if name.startswith(prefix) and digits.isascii() and digits.isdigit():
            out.append(int(digits))
    return sorted(out)


class SysfsReader:
    """File access relative to a sysfs root, with errors that name the file.

    The one sysfs file reader of the package: the layout (:mod:`.sysfs`,
    :mod:`.pci`), the nodes' memory (:mod:`.meminfo`), the caches
    (:mod:`.caches`), HMAT (:mod:`.hmat`) and the memory tiers (:mod:`.tiers`).
    """

    def __init__(self, root: str) -> None:
        self.root = root

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def text(self, *parts: str, required: bool = True) -> Optional[str]:
        path = self.path(*parts)
        try:
            return read_ascii(path)
        except (FileNotFoundError, NotADirectoryError):
            if required:
                raise TopologyError(f"missing sysfs file {path}") from None
            return None
        except OSError as exc:
            # EINVAL/ENODEV: an attribute the kernel refuses to show; treat
            # an optional one as absent, a required one as an error.
            if not required and exc.errno in (errno.EINVAL, errno.ENODEV, errno.ENXIO):
                return None
            reason = exc.strerror or str(exc)
            raise TopologyError(f"cannot read sysfs file {path}: {reason}") from exc

    def cpulist(self, *parts: str, required: bool = True) -> Optional[frozenset[int]]:
        text = self.text(*parts, required=required)
        if text is None:
            return None
        try:
            return parse_cpulist(text.strip())
        except ListParseError as exc:
            raise TopologyError(f"malformed list in {self.path(*parts)}: {exc}") from exc

    def integer(self, *parts: str, required: bool = True, base: int = 10) -> Optional[int]:
        text = self.text(*parts, required=required)
        if text is None:
            return None
        try:
            return int(text.strip(), base)
        except ValueError:
            raise TopologyError(
                f"malformed number {text.strip()!r} in {self.path(*parts)}"
            ) from None

    def listdir(self, *parts: str) -> Optional[List[str]]:
        try:
            return sorted(os.listdir(self.path(*parts)))
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise TopologyError(
                f"cannot list sysfs directory {self.path(*parts)}: {exc.strerror}"
            ) from exc
