"""Reading one small text file of a sysfs tree, with bounds (shell; shared by _sysfs and _kfd).

A ``--sysfs-root`` is any directory a user names, so its files are untrusted:
a FIFO would block ``open`` and ``read`` for good, ``/dev/zero`` never ends,
and bytes need not be ASCII.  Every attribute sysfs shows is a regular file
of at most a page, so only regular files are read, at most
:data:`MAX_FILE_BYTES` of each, as ASCII.  Anything else is a
:class:`~pynumabind.errors.TopologyError` naming the file; errors from
``open`` itself (missing file, permissions, EINVAL from the kernel) reach
the caller as ``OSError``, whose policy on optional files decides.  These
are files of the machine's layout; this process's own state (``/proc/self``,
its cgroup) is :mod:`._proc`'s to read.
"""

from __future__ import annotations

import errno
import os
import stat

from ..errors import TopologyError

__all__ = ["MAX_FILE_BYTES", "read_ascii"]

#: Far more than any sysfs attribute (a page) or KFD properties file holds.
MAX_FILE_BYTES = 1 << 20
_CHUNK = 8192  # two pages: one read returns a whole sysfs attribute


def read_ascii(path: str, what: str = "sysfs file") -> str:
    """The text of the regular file ``path``; ``what`` names it in errors."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        if not stat.S_ISREG(mode):
            raise TopologyError(f"{what} {path} is not a regular file")
        # Raw reads in small chunks: a sysfs attribute is at most a page, and
        # asking a buffered file for MAX_FILE_BYTES + 1 costs a megabyte's
        # allocation per file (3x the whole read, measured).
        chunks = []
        size = 0
        while True:
            chunk = os.read(fd, _CHUNK)
            if not chunk:
                break
            size += len(chunk)
            if size > MAX_FILE_BYTES:
                raise TopologyError(f"{what} {path} is larger than {MAX_FILE_BYTES} bytes")
            chunks.append(chunk)
    finally:
        os.close(fd)
    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    try:
        return data.decode("ascii")
    except UnicodeDecodeError as exc:
        raise TopologyError(f"{what} {path} is not ASCII text (byte {exc.start})") from exc
