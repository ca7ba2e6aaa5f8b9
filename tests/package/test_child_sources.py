"""No test hands Python source text to a child interpreter.

Child bodies are module-level functions run through ``childproc`` (see its
docstring), where ruff, mypy and an editor see them.  The rule, checked on
the syntax tree of every test file (``tests/vm/guest`` excepted: it is the
guest's own program):

- an interpreter (``sys.executable``, a ``*starred`` argument list, a name or
  attribute containing ``python``, or a string whose file name starts with
  ``python``), followed by option strings (and the values of ``-X``/``-W``)
  up to ``-c`` or ``-`` (the program on stdin), in a list or tuple display
  or in a call's positional arguments, is a violation: that child runs
  source text;
- ``run_in_child``/``child_command`` given a string, f-string or string
  concatenation instead of a function is a violation.

``ALLOWED`` lists the places not converted yet, each with its reason; a file
may hold at most that many violations, so no new one gets in.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import pytest

TESTS = Path(__file__).resolve().parents[1]
RUNNERS = ("run_in_child", "child_command")
PROGRAM_FLAGS = ("-c", "-")
OPTIONS_WITH_VALUES = ("-X", "-W")

# path relative to tests/ -> (most violations allowed, why it is not converted)
ALLOWED: Dict[str, Tuple[int, str]] = {
    "package/test_benchmarks.py": (
        1,
        "runs benchmarks/probe.py's cold program exactly as the benchmark does; the "
        "program text belongs to benchmarks/",
    ),
    "package/test_docs.py": (
        1,
        "runs the README's own code blocks verbatim: the documented text is what is tested",
    ),
    "discovery/test_intel_gpus.py": (
        1,
        "runs docs/site/xpu.md's XPU recipe verbatim: the documented text is what is tested",
    ),
    "vm/test_harness.py": (1, "the probe runs inside the QEMU guest, which has no tests/ tree"),
    "integrations/helpers.py": (1, "integrations tests: owned by the vLLM work, converted there"),
    "integrations/test_sglang.py": (1, "integrations tests: owned by the vLLM work"),
    "integrations/test_vllm.py": (1, "integrations tests: owned by the vLLM work"),
    "integrations/test_shared.py": (1, "integrations tests: owned by the vLLM work"),
}


def _is_interpreter(node: ast.expr) -> bool:
    if isinstance(node, ast.Starred):
        return True
    if isinstance(node, ast.Attribute):
        return node.attr == "executable" or "python" in node.attr.lower()
    if isinstance(node, ast.Name):
        return "python" in node.id.lower()
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.rsplit("/", 1)[-1].startswith("python")
    return False


def _runs_source(elements: Sequence[ast.expr]) -> bool:
    """An interpreter, then options (and ``-X``/``-W`` values), then ``-c`` or ``-``."""
    after_interpreter, previous = False, ""
    for element in elements:
        if _is_interpreter(element):
            after_interpreter, previous = True, ""
            continue
        text = element.value if isinstance(element, ast.Constant) else None
        if after_interpreter and isinstance(text, str):
            if text in PROGRAM_FLAGS:
                return True
            if text.startswith("-") or previous in OPTIONS_WITH_VALUES:
                previous = text
                continue
        after_interpreter = False
    return False


def _is_text(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)):
        return True  # a function is never concatenated or %-formatted
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr in ("format", "dedent") or _is_text(node.func.value)
    return False


def violations(source: str) -> List[int]:
    """Line numbers where ``source`` hands Python source text to a child."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.List, ast.Tuple)) and _runs_source(node.elts):
            found.append(node.lineno)
        elif isinstance(node, ast.Call):
            name = getattr(node.func, "id", getattr(node.func, "attr", ""))
            if _runs_source(node.args) or (
                name in RUNNERS and node.args and _is_text(node.args[0])
            ):
                found.append(node.lineno)
    return sorted(found)


def _test_files() -> List[Path]:
    guest = TESTS / "vm" / "guest"
    return sorted(p for p in TESTS.rglob("*.py") if guest not in p.parents)


@pytest.mark.parametrize(
    "source",
    [
        "subprocess.run([sys.executable, '-c', code])",
        "subprocess.run((sys.executable, '-c', 'print(1)'), check=True)",
        "subprocess.run([sys.executable, '-S', '-X', 'importtime', '-c', code])",
        "subprocess.run([*python_s, '-c', cold_source(0)])",
        "subprocess.Popen(['/usr/bin/python3', '-'], stdin=subprocess.PIPE)",
        "run(closed, '--', sys.executable, '-c', code, 'x')",
        "argv = [PYTHON, '-c', text]",
        "run_in_child('import os')",
        "run_in_child(f'import {name}')",
        "child_command(PRELUDE + body)",
        "run_in_child(textwrap.dedent(BODY))",
    ],
)
def test_the_rule_finds_source_text_handed_to_a_child(source: str) -> None:
    assert violations(source) == [1], source


@pytest.mark.parametrize(
    "source",
    [
        "subprocess.run(['sh', '-c', 'true'])",
        "subprocess.run([sys.executable, '-m', 'pynumabind', 'show'])",
        "subprocess.run([sys.executable, script, '-c', 'x'])",  # the script's own option
        "subprocess.run([sys.executable, 'script.py', '-c', 'x'])",
        "subprocess.run([sys.executable, '-X', 'importtime', ENTRY, '-c'])",
        "run_in_child(child_binding.bind_cpu1_node0, '1', env=env)",
        "child_command(recipe_drivers.run_pool, tmp_path, flags=['-S'])",
        "assert wrapper[:2] == ['sh', '-c']",
        "parse_cpulist('-')",
    ],
)
def test_the_rule_leaves_other_commands_alone(source: str) -> None:
    assert violations(source) == [], source


def test_no_test_hands_python_source_to_a_child() -> None:
    files = _test_files()
    assert len(files) > 40  # the walk really found the suite
    report = []
    for path in files:
        name = path.relative_to(TESTS).as_posix()
        lines = violations(path.read_text())
        allowed = ALLOWED.get(name, (0, ""))[0]
        if len(lines) > allowed:
            report.append(f"tests/{name}: lines {lines} (at most {allowed} allowed)")
    assert not report, (
        "Python source passed to a child process; write the body as a module-level "
        "function and run it with childproc.run_in_child:\n" + "\n".join(report)
    )


def test_every_allowed_file_exists() -> None:
    assert [name for name in ALLOWED if not (TESTS / name).is_file()] == []


def test_the_runner_takes_only_module_level_functions() -> None:
    from ..support.childproc import child_command

    def nested() -> None:
        pass

    for not_importable in ("import os", nested, lambda: None):
        with pytest.raises(TypeError, match="not a module-level function"):
            child_command(not_importable)  # type: ignore[arg-type]


def test_the_runner_passes_arguments_as_strings_and_returns_the_result() -> None:
    from ..support import child_environ
    from ..support.childproc import child_command, run_in_child

    argv = child_command(child_environ.print_argv_back, 1, "a b")
    assert argv[-3:] == ["tests.support.child_environ:print_argv_back", "1", "a b"]
    assert all(isinstance(part, str) for part in argv)
    result, stderr = run_in_child(child_environ.print_argv_back, 1, "a b")
    assert result == ["1", "a b"] and stderr == ""
