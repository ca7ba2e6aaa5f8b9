"""vLLM's launching process: who opted in, and vLLM's own binding turned off or refused.

vLLM decides its own NUMA binding once, in the process that launches
EngineCore (``vllm serve``, or ``LLM(...)``'s process), in
``vllm.utils.numa_utils.configure_subprocess``: an explicit ``--numa-bind``
(``--numa-bind-nodes``, ``--numa-bind-cpus``) or, from vLLM 0.34, an unset
``numa_bind`` (automatic binding) makes it start EngineCore and the workers
under ``numactl``.  What it decides there is what every process inherits,
so that is where pynumabind must act, before vLLM does.

There are two ways to opt in (:mod:`pynumabind.integrations.vllm`):
``PYNUMABIND_VLLM=1``, and ``--worker-cls
pynumabind.integrations.vllm.Worker`` (``LLM(worker_cls=...)``), which vLLM
records as ``parallel_config.worker_cls``.  The worker class itself is only
loaded in the workers, too late, but pynumabind's ``vllm.general_plugins``
entry point is loaded in the launching process as well: whether or not
``PYNUMABIND_VLLM`` is on, it puts :func:`resolve_launch` in front of
``configure_subprocess`` (:func:`install_launch_hook`).  That check reads
the config vLLM is about to act on; when neither opt-in is there it does
nothing at all, so installing pynumabind still changes nothing for a user
who did not ask.  When one is:

* an explicit vLLM binding flag is a ConfigError, raised there, before any
  process starts, naming the flag the user gave: vLLM fills
  ``numa_bind_nodes`` itself from ``--numa-bind`` later in that same call,
  so a check made afterwards (in EngineCore or a worker) would name
  ``--numa-bind-nodes``, a flag the user never gave;
* an unset ``numa_bind`` (vLLM's automatic mode) becomes ``False``, and one
  line says so, naming the opt-in: pynumabind binds instead, and no
  ``numactl`` wrapper is started.

The worker class is recognised by the name vLLM was given,
:data:`WORKER_CLS`, or as a class object deriving from it; a subclass given
by another dotted name is not imported in the launching process to find
out (that would run the user's module there), so such a launch keeps
vLLM's decision, and the worker says so when it binds.

This module imports nothing of vLLM until :func:`install_launch_hook` runs
(inside vLLM, from its plugin loader), and the decision itself,
:func:`launch_action`, is pure: a config in, what to do out.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from typing import Any, Callable, List, Mapping, Optional, Tuple

from ..errors import ConfigError

__all__ = [
    "OPT_IN_VARIABLE",
    "WORKER_CLS",
    "advised",
    "install_launch_hook",
    "launch_action",
    "names_our_worker",
    "opt_ins",
    "refusal",
    "resolve_launch",
    "vllm_binding_flag",
]

#: The dotted name of pynumabind's vLLM worker class, as ``--worker-cls`` takes it.
WORKER_CLS = "pynumabind.integrations.vllm.Worker"
#: The environment switch that opts in with vLLM's stock worker.
OPT_IN_VARIABLE = "PYNUMABIND_VLLM"

#: A child of vLLM's logger, so the line appears in vLLM's own log.
vllm_log = logging.getLogger("vllm.pynumabind")


def vllm_binding_flag(parallel_config: Any) -> str:
    """The explicit flag that turns vLLM's own binding on, or ``""``.

    vLLM's automatic binding (``_numa_bind_auto``, vLLM >= 0.34) is not an
    explicit flag: it sets ``numa_bind`` and ``numa_bind_nodes`` itself.
    Read before vLLM's ``configure_subprocess`` runs (as
    :func:`resolve_launch` is), ``numa_bind_nodes`` is the user's.
    """
    if getattr(parallel_config, "_numa_bind_auto", False):
        return ""
    if getattr(parallel_config, "numa_bind_nodes", None) is not None:
        return "--numa-bind-nodes"
    if getattr(parallel_config, "numa_bind_cpus", None) is not None:
        return "--numa-bind-cpus"
    if getattr(parallel_config, "numa_bind", None):
        return "--numa-bind"
    return ""


def names_our_worker(worker_cls: Any) -> bool:
    """Whether vLLM's ``worker_cls`` is pynumabind's worker class (see the module)."""
    if isinstance(worker_cls, str):
        return worker_cls.strip() == WORKER_CLS
    ours = getattr(sys.modules.get("pynumabind.integrations.vllm"), "Worker", None)
    return isinstance(worker_cls, type) and isinstance(ours, type) and issubclass(worker_cls, ours)


def opt_ins(parallel_config: Any, environ: Mapping[str, str]) -> List[Tuple[str, str]]:
    """The pynumabind switches on for this launch, each with how to turn it off."""
    from ..discovery._environ import parse_flag
    from ..options import environ_value

    on = []
    if names_our_worker(getattr(parallel_config, "worker_cls", None)):
        on.append((f"--worker-cls {WORKER_CLS}", "use vLLM's own worker class"))
    value = environ_value(environ, OPT_IN_VARIABLE)
    if value is not None and parse_flag(OPT_IN_VARIABLE, value):
        on.append((f"{OPT_IN_VARIABLE}=1", f"unset {OPT_IN_VARIABLE}"))
    return on


def refusal(what: str, flag: str, switches: List[Tuple[str, str]]) -> ConfigError:
    """The double-bind ConfigError: vLLM's ``flag`` and pynumabind's ``switches`` are both on."""
    switches = switches or [("pynumabind's vLLM hook", "remove the pynumabind hook")]
    also = "" if flag == "--numa-bind" else " (and --numa-bind)"
    return ConfigError(
        f"{what}: vLLM's own NUMA binding ({flag}) is on, and pynumabind was asked to bind "
        f"too ({' and '.join(s for s, _ in switches)}); turn one off: drop {flag}{also}, or "
        f"{' and '.join(off for _, off in switches)}"
    )


def advised(environ: Mapping[str, str]) -> bool:
    """Whether ``PYNUMABIND_MODE`` asks for mode ``advised`` (a bad value: the bind says so)."""
    from ..discovery._environ import MODE_VARIABLE
    from ..model import CpuMode
    from ..options import environ_value, parse_choice

    text = environ_value(environ, MODE_VARIABLE)  # blank is unset (the one rule)
    try:
        mode = parse_choice(CpuMode, text, "mode", variable=MODE_VARIABLE)
    except ConfigError:
        return False
    return mode is CpuMode.ADVISED


def launch_action(parallel_config: Any, environ: Mapping[str, str]) -> Optional[str]:
    """What the launching process does before vLLM decides (pure; see the module).

    ``None``: nothing (no opt-in, or vLLM's binding off already).  A message:
    turn vLLM's automatic binding off (set ``numa_bind`` to ``False``) and
    log it.  An explicit vLLM binding flag with an opt-in: the ConfigError
    naming that flag.
    """
    switches = opt_ins(parallel_config, environ)
    if not switches:
        return None
    flag = vllm_binding_flag(parallel_config)
    if flag:
        raise refusal("vLLM launch", flag, switches)
    if getattr(parallel_config, "numa_bind", False) is not None:
        return None
    plugin = any(s.startswith(OPT_IN_VARIABLE) for s, _ in switches)
    binds = "EngineCore and each worker" if plugin else "each worker"
    instead = f"pynumabind binds {binds} instead"
    if advised(environ):
        instead = (
            f"pynumabind binds {binds} as this machine's advice record says instead "
            "(PYNUMABIND_MODE=advised: where it says binding makes no difference, nothing "
            "binds them)"
        )
    return (
        "pynumabind: vLLM's automatic NUMA binding (numa_bind unset) is off for this "
        f"launch; {instead} ({' and '.join(s for s, _ in switches)})"
    )


def resolve_launch(vllm_config: Any, *args: Any, **kwargs: Any) -> None:
    """Ahead of vLLM's ``configure_subprocess``: refuse, or turn vLLM's automatic binding off."""
    parallel_config = vllm_config.parallel_config
    message = launch_action(parallel_config, os.environ)
    if message is not None:
        parallel_config.numa_bind = False
        vllm_log.info("%s", message)


def _wrap(method: Callable[..., Any], hook: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        hook(*args, **kwargs)
        return method(*args, **kwargs)

    wrapper.__pynumabind_wrapped__ = True  # type: ignore[attr-defined]
    return wrapper


def install_launch_hook() -> bool:
    """Put :func:`resolve_launch` in front of ``numa_utils.configure_subprocess``.

    vLLM's callers look the function up at call time, so replacing the
    module attribute is enough.  Idempotent; False when this vLLM has no
    ``configure_subprocess`` (no binding of its own to turn off).
    """
    try:
        from vllm.utils import numa_utils
    except ImportError:
        return False
    original: Optional[Callable[..., Any]] = getattr(numa_utils, "configure_subprocess", None)
    if original is None:
        return False
    if not getattr(original, "__pynumabind_wrapped__", False):
        numa_utils.configure_subprocess = _wrap(original, resolve_launch)
    return True
