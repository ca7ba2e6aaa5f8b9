"""``memory_on``'s blocks: a stack per thread, and what puts a policy back.

The guarantees are "What memory_on guarantees" in
:mod:`pynumabind.binding.placement`; this is how they are kept.

Each thread has the stack of the blocks in force on it, innermost last
(:class:`_Blocks`: a ``threading.local``, so a forked child's one thread
keeps the forking thread's stack and the other threads' go with them).  A
block (:class:`_Block`) holds the policy read before it and the thread's
allowed memory nodes then.  :meth:`MemoryOn.__enter__` pushes the block and
arms its finalizer before it calls ``set_mempolicy``: the undo is recorded
before the change, as a bind's journal is.  Leaving (:func:`_leave`) puts
the policy back only for the innermost block, and is idempotent, so an
interrupt inside it is finished by calling it again; a block left out of
order hands what it would have put back to the block entered after it.
Putting back (:func:`_put_back`) falls back, when the kernel refuses the
saved policy because the cpuset's ``mems`` changed, to the nearest one it
accepts (:func:`_nearest`, with the kernel's own remapping,
:func:`_remap`).  A block whose object is freed while still in force ends
through its finalizer (:func:`_abandoned`), on its own thread only.
"""

from __future__ import annotations

import contextlib
import errno
import threading
import warnings
import weakref
from types import TracebackType
from typing import AbstractSet, Iterator, List, Optional, Tuple, Type

from .._mempolicy import NODELESS_MODES
from .._os import libnuma as _libnuma
from .._os import proc as _proc
from .._text import format_ids
from ..errors import ConfigError, NumaSyscallError
from ._target import Target, refused

__all__ = ["MemoryOn"]


class _Block:
    """One ``memory_on`` block in force on a thread: what to put back when it ends.

    ``previous`` is the policy before the block (as ``get_mempolicy`` read
    it), ``allowed`` the thread's allowed memory nodes then (the kernel's
    remapping of ``previous`` after a cpuset change starts from them).  A
    block left out of order hands both to the block entered after it.
    """

    __slots__ = ("allowed", "previous", "thread")

    def __init__(self, previous: _libnuma.KernelPolicy, allowed: frozenset[int]) -> None:
        self.previous = previous
        self.allowed = allowed
        self.thread = threading.get_native_id()


class _Blocks(threading.local):
    """Each thread's blocks in force, innermost last.

    A ``threading.local``: a forked child's one thread keeps the forking
    thread's list (its copy of that thread's policy and blocks), and the
    other threads' lists are gone with them.
    """

    def __init__(self) -> None:
        self.stack: List[_Block] = []


_BLOCKS = _Blocks()


def _index(stack: List[_Block], block: _Block) -> Optional[int]:
    for index, entry in enumerate(stack):
        if entry is block:
            return index
    return None


def _drop(stack: List[_Block], block: _Block) -> None:
    """Remove ``block`` from ``stack`` by identity, found afresh.

    Not by an index found earlier: a finalizer (:func:`_abandoned`) may end
    another block of this thread in between, when the garbage collector
    runs inside a call.
    """
    index = _index(stack, block)
    if index is not None:
        del stack[index]


def _describe(policy: _libnuma.KernelPolicy) -> str:
    if policy.mode in NODELESS_MODES:
        return policy.kernel_policy
    return f"{policy.kernel_policy} on node {format_ids(policy.nodes)}"


def _remap(nodes: AbstractSet[int], old: AbstractSet[int], new: AbstractSet[int]) -> frozenset[int]:
    """``nodes`` moved from the allowed set ``old`` to ``new`` as the kernel does it.

    The kernel's ``nodes_remap``: the i-th node of ``old`` becomes the
    (i mod len(new))-th of ``new``; a node outside ``old`` stays itself.
    This is what a policy in force (without ``MPOL_F_STATIC_NODES``) becomes
    when its cpuset's ``mems`` change.
    """
    before, after = sorted(old), sorted(new)
    if not before or not after:
        return frozenset(nodes)
    return frozenset(after[before.index(n) % len(after)] if n in old else n for n in nodes)


def _nearest(block: _Block) -> Iterator[Tuple[_libnuma.KernelPolicy, str]]:
    """What to put back, nearest first, when the kernel refuses ``block.previous``."""
    previous = block.previous
    try:
        allowed = _proc.mems_allowed()
    except NumaSyscallError:
        allowed = frozenset()
    part = previous.nodes & allowed
    if part:
        yield (
            _libnuma.KernelPolicy(previous.mode, frozenset(part), previous.flags),
            "the same policy over the allowed part of its nodes",
        )
    moved = _remap(previous.nodes, block.allowed, allowed) & allowed
    if moved and moved != part:
        yield (
            _libnuma.KernelPolicy(previous.mode, moved, previous.flags),
            "the same policy on the nodes the kernel remaps its nodes to",
        )
    yield _libnuma.KernelPolicy(_libnuma.MPOL_DEFAULT, frozenset(), 0), "the default policy"


def _set(policy: _libnuma.KernelPolicy) -> None:
    nodes = policy.nodes if policy.mode not in NODELESS_MODES else frozenset()
    _libnuma.set_mempolicy(policy.mode, nodes, policy.flags)


def _put_back(block: _Block) -> None:
    """Set ``block.previous`` again, or the nearest policy the kernel accepts (one warning).

    The kernel refuses the saved policy (``EINVAL``) when none of its nodes
    is allowed any more: the cpuset's ``mems`` changed during the block.
    Then the same mode over the allowed part of its nodes, else over the
    nodes the kernel's own remapping gives, else the default policy is set,
    and a :class:`RuntimeWarning` says which.  The block's policy is never
    left in place unless the kernel refuses even the default (``EPERM``
    under a seccomp filter installed during the block): that raises.
    """
    previous = block.previous
    try:
        _set(previous)
        return
    except NumaSyscallError as exc:
        if exc.errno != errno.EINVAL or previous.mode in NODELESS_MODES:
            raise
        refusal = exc
    for policy, how in _nearest(block):
        try:
            _set(policy)
        except NumaSyscallError:
            continue
        try:
            allowed = format_ids(_proc.mems_allowed())
        except NumaSyscallError:
            allowed = "unknown"
        warnings.warn(
            f"memory_on: the kernel refused the policy from before the block, "
            f"{_describe(previous)} (EINVAL: this thread's allowed memory nodes are now "
            f"{allowed}, were {format_ids(block.allowed)}: its cpuset changed during the "
            f"block); put back {how}, {_describe(policy)}",
            RuntimeWarning,
            stacklevel=4,
        )
        return
    raise refusal


def _leave(stack: List[_Block], block: _Block) -> None:
    """Take ``block`` off its thread's stack, putting the policy back if it is innermost.

    Idempotent, so that an interrupt anywhere in it can be finished by
    calling it again: the policy is put back before the block leaves the
    stack.  A block that is not innermost (a coroutine or generator
    suspended inside a block, another one entered meanwhile and still in
    force) hands what it would have put back to the block entered after it,
    which puts it back when it ends; the thread keeps that block's policy
    meanwhile.  One :class:`RuntimeWarning` says so.
    """
    index = _index(stack, block)
    if index is None:
        return
    if index + 1 < len(stack):
        above = stack[index + 1]
        above.previous, above.allowed = block.previous, block.allowed
        _drop(stack, block)
        warnings.warn(
            "memory_on blocks left out of order on one thread (a coroutine or generator "
            "suspended inside a block while another entered one): a memory policy is per "
            "thread, so code the thread ran meanwhile allocated under the innermost block's "
            "policy; the policy from before both is put back when the last one ends",
            RuntimeWarning,
            stacklevel=3,
        )
        return
    try:
        _put_back(block)
    except NumaSyscallError:
        _drop(stack, block)  # refused even the default: nothing more can be put back for it
        raise
    _drop(stack, block)


class MemoryOn:
    """The context manager :func:`~pynumabind.memory_on` returns; use it once, in one thread.

    ``policy`` (the policy asked for), ``kernel_policy`` (its ``MPOL_*``
    name), ``nodes`` and ``reasons`` say where the block allocates and why;
    ``previous`` is the :class:`~pynumabind.KernelPolicy` that is set again on
    exit (as ``get_mempolicy`` read it when the block, or an enclosing block
    left before it, was entered), ``None`` outside the block.
    """

    def __init__(self, target: Target) -> None:
        self._target = target
        self.nodes = target.nodes
        self.kernel_policy = _libnuma.MODE_NAMES.get(target.mode, str(target.mode))
        self.policy = target.policy.value
        self.reasons = target.reasons
        self._block: Optional[_Block] = None
        self._finalizer: Optional[weakref.finalize[[_Block], MemoryOn]] = None
        self._used = False

    @property
    def previous(self) -> Optional[_libnuma.KernelPolicy]:
        block = self._block
        return None if block is None else block.previous

    def __repr__(self) -> str:
        return f"memory_on({self.kernel_policy} on node {format_ids(self.nodes)})"

    def __enter__(self) -> MemoryOn:
        if self._used:
            raise ConfigError("a memory_on(...) object is used once; call memory_on again")
        self._used = True
        try:
            previous = _libnuma.get_mempolicy()
            allowed = _proc.mems_allowed()
        except NumaSyscallError as exc:
            raise refused(exc, "get_mempolicy (reading the policy to restore)", None) from None
        block = _Block(previous, allowed)
        stack = _BLOCKS.stack
        try:
            # The undo is recorded before the change (as a bind's journal is).
            self._block = block
            stack.append(block)
            self._finalizer = weakref.finalize(self, _abandoned, block)
            self._finalizer.atexit = False
            _libnuma.set_mempolicy(self._target.mode, self.nodes)
        except NumaSyscallError as exc:  # refused: nothing changed
            _drop(stack, block)
            self._ended()
            raise refused(exc, f"set_mempolicy({self.kernel_policy})", self.nodes) from None
        except BaseException:  # KeyboardInterrupt, maybe after the change: undo it
            _leave(stack, block)
            self._ended()
            raise
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        block = self._block
        if block is None:
            return
        try:
            stack = _BLOCKS.stack
            mine = _index(stack, block) is not None
        except BaseException:  # an interrupt: this thread's block ends all the same
            _leave(_BLOCKS.stack, block)
            self._ended()
            raise
        if not mine:
            raise ConfigError(
                f"memory_on block entered on thread {block.thread} and left on thread "
                f"{threading.get_native_id()}: a memory policy is per thread, so thread "
                f"{block.thread} still allocates on node {format_ids(self.nodes)}"
            )
        try:
            _leave(stack, block)
        except NumaSyscallError as error:
            self._ended()
            previous = block.previous
            raise refused(
                error,
                f"set_mempolicy({previous.kernel_policy}) restoring the policy",
                previous.nodes,
            ) from None
        except BaseException:  # an interrupt inside: finish putting the policy back
            _leave(stack, block)
            self._ended()
            raise
        self._ended()

    def _ended(self) -> None:
        self._block = None
        finalizer, self._finalizer = self._finalizer, None
        if finalizer is not None:
            finalizer.detach()


def _abandoned(block: _Block) -> None:
    """A block whose object was freed while still in force ends now, if on this thread.

    Where an interrupt lands at the very start of ``__exit__``, before any
    of it runs, nothing in it can put the policy back; nor is ``__exit__``
    called for a suspended generator that is never closed.  The object then
    dies (when the interrupt's traceback or the generator is freed) and this
    ends its block.  Only while a block is in force is this callback armed,
    so a Ctrl-C is never swallowed by a finaliser of a block that ended.
    On another thread it can do nothing: a memory policy is per thread.
    """
    with contextlib.suppress(Exception):  # nothing may escape a finaliser
        _leave(_BLOCKS.stack, block)
