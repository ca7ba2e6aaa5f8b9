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
