"""Exception hierarchy.

Every error pynumabind raises derives from :class:`PynumabindError`, so a
launcher can catch one type.  Errors about bad *input* also derive from
``ValueError`` and errors from the kernel also derive from ``OSError``, so
callers who already handle those keep working.  The library never calls
``sys.exit`` and never lets libnuma print: failures surface here.

The errors write ids and quote bad input by the package's one set of text
rules (:mod:`pynumabind._text`).
"""

from __future__ import annotations

import errno as _errno
import os

from ._text import clipped, format_ids

# typing is for type checkers only: a bind loads none of it (see pynumabind._record).
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import AbstractSet, Optional

__all__ = [
    "BindError",
    "ConfigError",
    "LibnumaUnavailableError",
    "ListParseError",
    "NotABufferError",
    "NumaSyscallError",
    "PinError",
    "PlacementSyscallError",
    "PlanError",
    "ProcessStateError",
    "PynumabindError",
    "ReadOnlyBufferError",
    "SnapshotFileError",
    "TopologyError",
    "UnknownIdError",
]


class PynumabindError(Exception):
    """Base class of every error raised by pynumabind."""


class ListParseError(PynumabindError, ValueError):
    """A CPU list, node list or cpumask could not be parsed.

    Carries the offending ``token`` and its character ``position`` in ``text``
    so a user can find the mistake in a long override string.
    """

    def __init__(self, message: str, *, text: str, token: str, position: int) -> None:
        super().__init__(f"{message}: {token!r} at position {position} in {clipped(text, 80)!r}")
        self.text = text
        self.token = token
        self.position = position


class ConfigError(PynumabindError, ValueError):
    """A configuration value (argument or environment variable) is invalid."""


class TopologyError(PynumabindError):
    """The machine's topology could not be read or is inconsistent."""


class SnapshotFileError(TopologyError, ConfigError):
    """A topology snapshot file (``--topology``, ``PYNUMABIND_TOPOLOGY``) cannot be used.

    Missing, unreadable, not a regular file, too large, not UTF-8, not JSON,
    or not a snapshot.  A :class:`TopologyError`, as it always was, and a
    :class:`ConfigError`: the file is a bad value, which the CLI reports as
    a usage error (exit status 2) whatever is wrong with it.
    """


class PlanError(PynumabindError, ValueError):
    """No valid plan exists for the request (unknown node, empty intersection...)."""


class UnknownIdError(PlanError, ConfigError):
    """An option or variable names a CPU, NUMA node or rank the machine (or the plan) lacks.

    A :class:`PlanError`, as it always was, and a :class:`ConfigError`: a bad
    value, which the CLI reports as a usage error (exit status 2), as it does
    ``--allowed-cpus`` naming a CPU that is not online.
    """


class LibnumaUnavailableError(PynumabindError, OSError):
    """libnuma.so.1 could not be loaded; the message names the package to install."""


class NumaSyscallError(PynumabindError, OSError):
    """A memory-policy or CPU-affinity syscall failed.

    ``errno`` is the kernel's error number, ``operation`` says what was
    attempted (``set_mempolicy(MPOL_BIND)``) and ``nodes`` which nodes it named.
    """

    def __init__(self, err: int, operation: str, nodes: Optional[AbstractSet[int]] = None) -> None:
        name = _errno.errorcode.get(err, str(err))
        where = f" with nodes {format_ids(nodes)}" if nodes is not None else ""
        super().__init__(err, f"{operation}{where} failed: {name} ({os.strerror(err)})")
        self.operation = operation
        self.nodes = frozenset(nodes) if nodes is not None else None


class ProcessStateError(PynumabindError, OSError):
    """This process's own state could not be read from the kernel.

    Raised by :mod:`pynumabind._os.proc`, the one module that reads it: ``path``
    is the file (``/proc/self/task/42/stat``) or call it read, ``errno`` the
    kernel's error number when there was one (``None`` for a file that reads
    but does not parse).
    """

    def __init__(self, message: str, *, path: str, err: Optional[int] = None) -> None:
        if err is None:
            super().__init__(message)
        else:
            super().__init__(err, message)
        self.path = path


# The placement errors (bind_memory, memory_on): kept with the others, so every
# layer raises and every caller catches them from one module.


class NotABufferError(ConfigError, TypeError):
    """``bind_memory`` was given something whose memory it cannot address."""


class ReadOnlyBufferError(ConfigError):
    """``bind_memory`` was given a read-only buffer (``bytes``, a read-only ``mmap``)."""


class PlacementSyscallError(NumaSyscallError):
    """The kernel refused ``mbind``/``set_mempolicy``/``get_mempolicy``.

    ``errno`` is the kernel's (``EPERM``: a seccomp profile; ``EFAULT``: part
    of the range is not mapped; ``EINVAL``: a node outside the allowed ones);
    ``fix`` says what to do; the message names the call and the range.
    """

    def __init__(
        self,
        err: int,
        operation: str,
        nodes: Optional[AbstractSet[int]],
        fix: str,
    ) -> None:
        super().__init__(err, operation, nodes)
        self.fix = fix
        self.strerror = f"{self.strerror}; {fix}"


class PinError(PynumabindError):
    """``host_buffer(pin=True)`` could not register the buffer with CUDA.

    No CUDA runtime usable from this process (the message names why: torch
    not imported, ``libcudart`` not loadable, no device), or
    ``cudaHostRegister`` failed (the message names CUDA's error).
    """


class BindError(PynumabindError):
    """Applying a plan failed and, with ``on_error="raise"``, was rolled back."""


class AdviceRecordError(ConfigError):
    """An advice record (``pynumabind advise --save``) cannot be read, written or used.

    The message names the file and what was wrong with it: not JSON, not an
    advice record, a key of the wrong type, a file that is not a record in
    the way of a save.
    """
