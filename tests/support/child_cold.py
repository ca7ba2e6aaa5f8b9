"""Child bodies that look at what a fresh interpreter loads.

Nothing is imported at module level: ``_child.py`` imports this module before
calling a function, and whatever it imported would count as loaded by the
code under test.  (``from __future__`` imports nothing; annotations stay
strings, so builtin generics are fine on Python 3.9.)
"""

from __future__ import annotations


def import_pulls_no_pynvml_numpy_torch() -> dict[str, list[str]]:
    import sys

    import pynumabind

    touched = [pynumabind.bind_current_process, pynumabind.apply_plan, pynumabind.Binding]
    assert all(callable(t) for t in touched)
    return {"loaded": sorted(m for m in ("pynvml", "numpy", "torch") if m in sys.modules)}


def star_import_names() -> list[str]:
    """The names ``from pynumabind import *`` binds."""
    namespace: dict[str, object] = {}
    exec("from pynumabind import *", namespace)  # the statement under test; only legal at top
    return sorted(k for k in namespace if k != "__builtins__")


def pynumabind_modules_loaded_by(module: str) -> dict[str, list[str]]:
    """What importing ``pynumabind.<module>`` loads beyond what its packages load.

    ``packages``: every ``pynumabind.*`` module loaded once the packages
    holding ``module`` are imported (``pynumabind`` itself, and for
    ``records.values`` also ``pynumabind.records``); ``module``: every one
    loaded once ``module`` is imported after them.
    """
    import importlib
    import sys

    parts = module.split(".")
    for depth in range(len(parts)):
        importlib.import_module(".".join(["pynumabind", *parts[:depth]]))
    packages = sorted(m for m in sys.modules if m.startswith("pynumabind."))
    importlib.import_module(f"pynumabind.{module}")
    loaded = sorted(m for m in sys.modules if m.startswith("pynumabind."))
    return {"packages": packages, "module": loaded}


def loaded_after_import(*prefixes: str) -> list[str]:
    """The modules starting with one of ``prefixes`` after ``import pynumabind``."""
    import sys

    import pynumabind

    assert pynumabind.__name__ == "pynumabind"
    return sorted(m for m in sys.modules if m.startswith(prefixes))


def pynvml_after_importing_discovery() -> list[str]:
    """Whether pynvml is loaded after touching the public API and every discovery module."""
    import sys

    import pynumabind

    assert isinstance(pynumabind.Topology, type)
    from pynumabind import discovery
    from pynumabind._os import kfd as _kfd
    from pynumabind._os import nvml as _nvml
    from pynumabind._os import sysfs as _sysfs
    from pynumabind.discovery import _visible

    assert all(
        m.__name__.startswith("pynumabind.") for m in (discovery, _nvml, _sysfs, _visible, _kfd)
    )
    return sorted(m for m in sys.modules if m == "pynvml" or m.startswith("pynvml."))


def modules_after_import_and_bind() -> list[list[str]]:
    """sys.modules after ``import pynumabind``, then after a bind and restore."""
    import sys

    import pynumabind

    after_import = sorted(sys.modules)
    pynumabind.bind_current_process(0, nprocs=1, environ={}).restore()
    return [after_import, sorted(sys.modules)]


def typing_logging_re_after_import() -> list[str]:
    """Which of typing, logging and re a bare ``import pynumabind`` loads."""
    import sys

    import pynumabind

    assert pynumabind.__name__ == "pynumabind"
    return sorted(m for m in ("typing", "logging", "re") if m in sys.modules)


def cffi_after_declarations_then_build() -> list[object]:
    """[cffi modules loaded by reading DECLARATIONS, whether cffi is in after build_ffi()]."""
    import sys

    from pynumabind import _libnuma_build

    assert _libnuma_build.DECLARATIONS
    before = sorted(m for m in ("cffi", "pycparser") if m in sys.modules)
    _libnuma_build.build_ffi()
    return [before, "cffi" in sys.modules]


def torch_after_placement() -> bool:
    """Whether binding a buffer and ``memory_on`` loaded torch."""
    import sys

    from pynumabind import bind_memory, memory_on

    bind_memory(bytearray(8192), node=0)
    with memory_on(node=0):
        pass
    return "torch" in sys.modules


def modules_loaded_by_a_bind(mode: str) -> dict[str, object]:
    """What ``import pynumabind`` and then a bind in ``mode`` add to ``sys.modules``.

    ``import``: the modules the import added; ``bind``: those the first
    ``bind_current_process(0, mode=mode)`` added after it; ``gpus``: how many
    GPUs the bind saw (GPUs bring the visibility rules with them).
    """
    import sys

    before = set(sys.modules)
    import pynumabind

    imported = set(sys.modules)
    binding = pynumabind.bind_current_process(0, nprocs=1, mode=mode, environ={})
    bound = set(sys.modules)
    binding.restore()
    topology = pynumabind.discovery.detect_topology(environ={})  # after the count: it loads
    return {
        "import": sorted(imported - before),
        "bind": sorted(bound - imported),
        "gpus": len(topology.gpus),
        "applied": binding.applied,
    }


def modules_loaded_by_verify() -> dict[str, object]:
    """Whether the verify rules are loaded before and after ``Binding.verify()``."""
    import sys

    import pynumabind

    binding = pynumabind.bind_current_process(0, nprocs=1, environ={})
    try:
        before = "pynumabind.binding._verify" in sys.modules
        result = binding.verify()
        after = "pynumabind.binding._verify" in sys.modules
        same = type(result) is pynumabind.binding.VerifyResult
    finally:
        binding.restore()
    return {"before": before, "after": after, "ok": bool(result.ok) and same}
