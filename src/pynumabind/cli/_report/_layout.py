"""What the CLI hands the report: how ``show``, ``plan`` and ``check`` print.

The report writes its machine, plans and check sections exactly as those
commands do, with their own functions; they live in ``pynumabind.cli``,
which imports the report, so they are handed in (no import cycle, lazy or
not).
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence

from ..._record import record
from ...model import Topology
from ...options import Options

__all__ = ["Layout"]


@record(frozen=True)
class Layout:
    """How ``show``, ``plan`` and ``check`` write what they print: the CLI's own functions.

    The CLI hands them in (:func:`pynumabind.cli.report_layout`), so the
    report writes each section as those commands do without importing the
    CLI's module, which imports this one (no import cycle, lazy or not).
    A record, not a dataclass: ``exec`` loads this module with the CLI's
    parser, and ``dataclasses`` (with ``inspect``) would add milliseconds
    to every wrapped command's start.
    """

    node_tables: Callable[[Topology], List[str]]
    gpu_table: Callable[[Topology], List[str]]
    warnings: Callable[[Topology], List[str]]
    plan_text: Callable[[Sequence[Any]], List[str]]
    check_text: Callable[[Any, Optional[str]], str]  # (report, note); reasons included
    check_note: Callable[[Topology, Options, int], Optional[str]]

    def __init__(  # noqa: PLR0917 - positional, as the dataclass's fields
        self,
        node_tables: Callable[[Topology], List[str]],
        gpu_table: Callable[[Topology], List[str]],
        warnings: Callable[[Topology], List[str]],
        plan_text: Callable[[Sequence[Any]], List[str]],
        check_text: Callable[[Any, Optional[str]], str],
        check_note: Callable[[Topology, Options, int], Optional[str]],
    ) -> None:
        self.__dict__.update(
            node_tables=node_tables,
            gpu_table=gpu_table,
            warnings=warnings,
            plan_text=plan_text,
            check_text=check_text,
            check_note=check_note,
        )
