"""The command line's usage error, apart so that the argparse parser and ``main`` share it.

:mod:`pynumabind.cli` maps it to exit status 2 and one line on stderr;
:mod:`pynumabind.cli._parser` raises it for every argparse error instead of
exiting, so ``main`` owns the exit status.
"""

from __future__ import annotations

__all__ = ["UsageError"]


class UsageError(Exception):
    """A command-line mistake: exit status 2."""
