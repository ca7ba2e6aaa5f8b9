"""The public fronts' keywords as TypedDicts: :class:`OptionKeywords`, :class:`ArgumentKeywords`.

Users and the docs know them as ``pynumabind.options.OptionKeywords`` and
``pynumabind.options.ArgumentKeywords`` (their ``__module__`` says so):
:mod:`pynumabind.options` hands them out from here on first use, because a
TypedDict needs ``typing`` at run time and a bind loads none of it.  Type
checkers import them from here under ``TYPE_CHECKING``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional, Sequence, Union

from .model import CpuMode, MemoryPolicy

if TYPE_CHECKING:  # pragma: no cover
    from typing_extensions import TypedDict
else:
    from typing import TypedDict

__all__ = ["ArgumentKeywords", "OptionKeywords"]


class OptionKeywords(TypedDict, total=False):
    """The keywords every public front takes besides rank, nprocs, mode and policy: written once."""

    nodes: Any  # NodesOverride, as given
    cpus: Any  # CpusOverride, as given
    gpu: Optional[int]
    gpus: Optional[Sequence[int]]
    rank_gpus: Optional[Sequence[int]]
    gpu_memory: bool
    interleave_nodes: Union[str, Iterable[int], None]
    weights: Union[str, Mapping[int, int], None]
    require_node: bool
    local_gpus: Optional[Sequence[int]]
    priority_cores: bool
    fallback: Optional[str]
    tiers: Optional[str]


class ArgumentKeywords(OptionKeywords, total=False):
    """:class:`OptionKeywords` and the four the fronts take positionally: rank ... policy."""

    rank: Optional[int]
    nprocs: Optional[int]
    mode: Union[str, CpuMode, None]
    policy: Union[str, MemoryPolicy, None]


for _name in __all__:  # documented, and shown, where users import them
    globals()[_name].__module__ = "pynumabind.options"
