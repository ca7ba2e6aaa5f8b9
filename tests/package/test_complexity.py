"""No function of the package is above cyclomatic complexity 15, as radon counts it.

ruff's C901 (``max-complexity = 15`` in pyproject.toml) counts differently:
it leaves out the branches of comprehensions and boolean operators that
radon counts, and passed functions radon put at 16 to 18.  radon is the
measure here: every function, method and nested function of every module,
through radon's own API (``radon cc -s -n C src/pynumabind`` shows the same
numbers).  radon is in the ``test`` extra; where it is not installed this
test skips, saying so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, List

import pytest

import pynumabind

PACKAGE = Path(pynumabind.__file__).parent

#: The most a function may have.
MAX_COMPLEXITY = 15


def _functions(blocks: List[Any]) -> Iterator[Any]:
    """Every function radon found, methods and nested functions included (not classes)."""
    from radon.visitors import Function

    for block in blocks:
        if isinstance(block, Function):
            yield block
            yield from _functions(block.closures)


def too_complex(source: str) -> List[str]:
    """``name (line): complexity`` for each function of ``source`` above the limit."""
    from radon.complexity import cc_visit

    return [
        f"{f.fullname} (line {f.lineno}): {f.complexity}"
        for f in _functions(cc_visit(source))
        if f.complexity > MAX_COMPLEXITY
    ]


@pytest.fixture(scope="module", autouse=True)
def _radon() -> None:
    pytest.importorskip(
        "radon", reason="radon is not installed (pip install '.[test]' installs it)"
    )


def test_no_function_is_above_the_limit() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        found += [f"{module}: {f}" for f in too_complex(path.read_text(encoding="utf-8"))]
    assert not found, "cyclomatic complexity above 15 (radon):\n" + "\n".join(found)


def test_the_check_counts_what_ruff_leaves_out() -> None:
    # 16 by radon: 1, the comprehension's loop and its 7 conditions, 1 for
    # the ``and`` and 6 for the ``or``s; ruff's C901 counts this function as 1.
    conditions = " ".join(f"if x != {i}" for i in range(7))
    source = (
        "def busy(xs, a, b):\n"
        f"    return [x for x in xs {conditions}] and (a or b or a or b or a or b or a)\n"
    )
    assert too_complex(source) == ["busy (line 1): 16"]
    # One fewer is at the limit, and passes; a method and a nested function count too.
    fewer = source.replace(" or a)", ")")
    assert too_complex(fewer) == []
    nested = "class C:\n    def m(self):\n        def inner(xs, a, b):\n"
    nested += "".join("        " + line + "\n" for line in source.splitlines()[1:])
    assert [name.split(" ")[0] for name in too_complex(nested)] == ["inner"]
