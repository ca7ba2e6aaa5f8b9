"""Where the advice record lives: one rule, for the writer and every reader.

1. ``PYNUMABIND_ADVICE``, when set (not blank): that file, and only that.
2. Otherwise the readers take the first of these that exists:

   a. the per-user file ``$XDG_CACHE_HOME/pynumabind/advice.json``
      (``~/.cache/pynumabind/advice.json`` when ``XDG_CACHE_HOME`` is unset
      or not absolute), so a user can measure for themselves;
   b. the system-wide file :data:`SYSTEM_PATH`
      (``/var/lib/pynumabind/advice.json``), which root writes once per
      machine, for workers that run under other accounts (a service user, a
      container's random uid).

   The writer writes the system-wide file when run as root, else the
   per-user one.

The first file found is the record: a stale per-user file is reported as
stale, not skipped for the system-wide one (which file decides never depends
on what is in it).  The rule only names paths: nothing here opens a file
(:mod:`pynumabind.records._file` reads and writes them).
"""

from __future__ import annotations

import os
from typing import List, Mapping, Optional, Tuple

from .._text import shown
from ..errors import AdviceRecordError
from ..options import ASCII_SPACE

__all__ = [
    "ADVICE_VARIABLE",
    "SYSTEM_PATH",
    "USER_FILE",
    "advice_path",
    "find",
    "read_paths",
    "save_path",
    "user_path",
]

ADVICE_VARIABLE = "PYNUMABIND_ADVICE"
SYSTEM_PATH = "/var/lib/pynumabind/advice.json"
USER_FILE = os.path.join("pynumabind", "advice.json")


def advice_path(environ: Mapping[str, str]) -> Optional[str]:
    """``PYNUMABIND_ADVICE``, or None when unset or blank; a bad value is an AdviceRecordError."""
    value = environ.get(ADVICE_VARIABLE)
    if value is None or not value.strip(ASCII_SPACE):
        return None
    text = value.strip(ASCII_SPACE)
    if "\0" in text:
        raise AdviceRecordError(f"invalid {ADVICE_VARIABLE}={shown(value)}: a NUL in a file name")
    if text.endswith(os.sep):
        raise AdviceRecordError(
            f"invalid {ADVICE_VARIABLE}={shown(value)}: it names a directory; name the file, "
            "such as /var/lib/pynumabind/advice.json"
        )
    return text


def user_path(environ: Mapping[str, str]) -> Optional[str]:
    """The per-user record, or None when this account has no home directory to put it in."""
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
    return os.path.join(cache, USER_FILE)


def read_paths(environ: Mapping[str, str]) -> List[str]:
    """Where readers look, in order (the first that exists is the record)."""
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
            f"this account has no home directory for the per-user advice record: set "
            f"{ADVICE_VARIABLE}=FILE, or run as root to write {SYSTEM_PATH}"
        )
    return mine


def find(environ: Mapping[str, str]) -> Tuple[Optional[str], List[str]]:
    """(the record's path or None, every path looked at)."""
    paths = read_paths(environ)
    for path in paths:
        if os.path.lexists(path):
            return path, paths
    return None, paths
