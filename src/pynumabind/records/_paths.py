"""Where the advice records live: one rule, for the writer and every reader.

A place is a file or a directory
--------------------------------
Every path this rule takes (``PYNUMABIND_ADVICE``, ``advise --save PATH``,
:meth:`Advice.save(path) <pynumabind.Advice.save>`, ``pynumabind records
PATH``, :func:`~pynumabind.load_advice`) names one of two things, decided by
the path alone, before anything is read (:func:`names_directory`):

* a **directory of records** when it ends with ``/``, or when it is an
  existing directory (a symbolic link to one included);
* otherwise **one record file**, whatever its name: ``advice.json``,
  ``records`` and ``x.conf`` are files when no directory of that name exists.
  (Name a directory that does not exist yet with a trailing ``/``.)

A record file is read and written as it always was.  A directory holds any
number of records, **one per machine type**
(:mod:`pynumabind.records._machine` says what a type is): a writer writes
its record under the file name its machine's fingerprint gives
(:func:`~pynumabind.records._machine.record_name`, such as
``intel-xeon-platinum-8480c-2n-8gpu-3f9a1c2b7d4e5a60.json``), over the
record of its type if there is one, and never touches the others; a reader
follows the record whose fingerprint matches its machine and ignores the
rest (:mod:`pynumabind.records._directory`).  Any file name ending in
``.json`` and not starting with ``.`` counts as a record of the directory,
so a record saved under another name (the old default ``advice.json``) is
one record among the others.

The default places
------------------
1. ``PYNUMABIND_ADVICE``, when set (not blank): that place, and only that.
2. Otherwise two directories, in this order:

   a. the per-user directory ``$XDG_CACHE_HOME/pynumabind/``
      (``~/.cache/pynumabind/`` when ``XDG_CACHE_HOME`` is unset or not
      absolute), so a user can measure for themselves;
   b. the system-wide directory :data:`SYSTEM_PATH`
      (``/var/lib/pynumabind/``), which root writes once per machine type,
      for workers under other accounts (a service user, a container's random
      uid).

   A reader follows the first record that matches its machine, looking in
   the per-user directory first; one that matches none is the one warning.
   The writer writes the system-wide directory when run as root, else the
   per-user one.

The old default file ``/var/lib/pynumabind/advice.json`` is simply one
record in the system-wide directory.  The rule only names paths (and asks
whether a directory exists): :mod:`pynumabind.records._file` reads and
writes files, :mod:`pynumabind.records._directory` reads directories.
"""

from __future__ import annotations

import os
from typing import List, Mapping, Optional

from .._text import shown
from ..errors import AdviceRecordError
from ..options import ASCII_SPACE

__all__ = [
    "ADVICE_VARIABLE",
    "SYSTEM_PATH",
    "USER_DIRECTORY",
    "advice_path",
    "names_directory",
    "read_paths",
    "save_path",
    "user_path",
]

ADVICE_VARIABLE = "PYNUMABIND_ADVICE"
#: The system-wide directory of records (a trailing ``/``: a directory, by the rule).
SYSTEM_PATH = "/var/lib/pynumabind/"
#: The per-user directory, under ``$XDG_CACHE_HOME``.
USER_DIRECTORY = "pynumabind" + os.sep


def names_directory(path: str) -> bool:
    """Whether ``path`` names a directory of records (module docstring): a trailing ``/``, or one.

    Decided by the path and whether a directory exists there, never by what
    a file holds.
    """
    return path.endswith(os.sep) or os.path.isdir(path)


def advice_path(environ: Mapping[str, str]) -> Optional[str]:
    """``PYNUMABIND_ADVICE``, or None when unset or blank; a bad value is an AdviceRecordError.

    A trailing ``/`` is kept: it says the place is a directory.
    """
    value = environ.get(ADVICE_VARIABLE)
    if value is None or not value.strip(ASCII_SPACE):
        return None
    text = value.strip(ASCII_SPACE)
    if "\0" in text:
        raise AdviceRecordError(f"invalid {ADVICE_VARIABLE}={shown(value)}: a NUL in a file name")
    return text


def user_path(environ: Mapping[str, str]) -> Optional[str]:
    """The per-user directory (ending in ``/``), or None when this account has no home for it."""
    cache = environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(cache):
        home = environ.get("HOME", "")
        if not os.path.isabs(home):
            import pwd

            try:
                home = pwd.getpwuid(os.getuid()).pw_dir
            except KeyError:  # a uid without a passwd entry (containers)
                return None
        if not os.path.isabs(home):
            return None
        cache = os.path.join(home, ".cache")
    return os.path.join(cache, USER_DIRECTORY)


def read_paths(environ: Mapping[str, str]) -> List[str]:
    """Where readers look, in order (module docstring); directories end in ``/``."""
    given = advice_path(environ)
    if given is not None:
        return [given]
    mine = user_path(environ)
    return [p for p in (mine, SYSTEM_PATH) if p is not None]


def save_path(environ: Mapping[str, str]) -> str:
    """Where the writer writes: ``PYNUMABIND_ADVICE``, else system-wide as root, else per-user."""
    given = advice_path(environ)
    if given is not None:
        return given
    if os.geteuid() == 0:
        return SYSTEM_PATH
    mine = user_path(environ)
    if mine is None:
        raise AdviceRecordError(
            f"this account has no home directory for the per-user advice records: set "
            f"{ADVICE_VARIABLE}=DIR/ (or FILE), or run as root to write {SYSTEM_PATH}"
        )
    return mine
