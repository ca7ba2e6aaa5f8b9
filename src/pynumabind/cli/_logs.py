"""The command line's logging: its stderr handler, and the warnings a command holds back.

Kept out of :mod:`pynumabind.cli` so that ``pynumabind exec``, which says
nothing unless something goes wrong, does not load ``logging`` (and with it
``traceback``, ``string``, ``re`` and more: several milliseconds of every
``exec``, where numactl takes one).  The CLI configures the ``pynumabind``
logger here for every other command as it starts, and for a quiet ``exec``
only once something is about to log a warning
(:func:`pynumabind._os.forksafe.when_logging_loads`): the same handler, the
same lines.
"""

from __future__ import annotations

import contextlib
import logging
import sys

# typing is for type checkers only (see pynumabind._record).
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Iterator, List, Sequence, Tuple

#: The logger every command's handler is set on: the package's.
LOGGER = "pynumabind"


class Formatter(logging.Formatter):
    """``pynumabind: WARNING: ...``, once: library messages may start with the name too."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        prefix = f"pynumabind: {record.levelname}: "
        doubled = prefix + "pynumabind: "
        return prefix + text[len(doubled) :] if text.startswith(doubled) else text


def configure(verbosity: int) -> None:
    """The ``pynumabind`` logger to stderr, at WARNING (``-v``: INFO, ``-vv``: DEBUG)."""
    level = logging.WARNING if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(Formatter("pynumabind: %(levelname)s: %(message)s"))
    root = logging.getLogger(LOGGER)
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


def saved() -> Tuple[List[logging.Handler], int, bool]:
    """The ``pynumabind`` logger's handlers, level and propagation (for :func:`restore`)."""
    logger = logging.getLogger(LOGGER)
    return logger.handlers[:], logger.level, logger.propagate


def restore(state: Tuple[List[logging.Handler], int, bool]) -> None:
    logger = logging.getLogger(LOGGER)
    logger.handlers[:], logger.level, logger.propagate = state


#: A logger nobody configured: what :func:`restore` puts back where ``logging``
#: was not loaded when the command began.
UNCONFIGURED: Tuple[List[logging.Handler], int, bool] = ([], logging.NOTSET, True)


class Held(logging.Filter):
    """Warnings held back while a command runs, then printed unless its output said them.

    Each warning once per command: ``plan --mode advised`` without a record
    logged its ~300-character warning, then printed it under Reasons and
    under Warnings.  A command whose output lists warnings (show, plan,
    check) holds the ``pynumabind`` logger's WARNING records on the stderr
    handler; :meth:`release` prints, after the output, only those the output
    did not contain (as text, or as a JSON string).
    """

    def __init__(self, printed: List[str]) -> None:
        super().__init__()
        self.records: List[logging.LogRecord] = []
        self.printed = printed

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            self.records.append(record)
            return False
        return True

    def said(self, record: logging.LogRecord) -> bool:
        import json  # not at the top: only a command that held a warning needs it

        text = record.getMessage()
        text = text[len("pynumabind: ") :] if text.startswith("pynumabind: ") else text
        out = "".join(self.printed)
        return text in out or json.dumps(text)[1:-1] in out

    def release(self, handlers: Sequence[logging.Handler]) -> None:
        for record in self.records:
            if not self.said(record):
                for handler in handlers:
                    handler.handle(record)
        self.records.clear()


@contextlib.contextmanager
def warnings_held(printed: List[str]) -> Iterator[None]:
    """Hold the command's warnings until its output (``printed``, as written) is out."""
    held = Held(printed)
    handlers = list(logging.getLogger(LOGGER).handlers)
    for handler in handlers:
        handler.addFilter(held)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(held)
        held.release(handlers)
