"""The README, docs/integrations.md and the site's pages, read as a newcomer reads them.

Every command or claim in them that can run on the test machine is run (or
checked against the code) here, read from the documents themselves, so the
documents cannot drift from the code or from each other:

* the README's two commands are what CI runs, verbatim, each in a fresh venv,
  and the test command needs nothing but PyPI (no local-version wheel, no
  extra package index);
* the README's quick-start command and its Python examples run unchanged;
* every ``pynumabind COMMAND --option`` the documents name exists, and every
  option the CLI page says all commands take is on every command;
* every ``PYNUMABIND_*`` variable they name is read somewhere, every
  ``tox -e`` environment and ``.ci/`` script they name exists;
* every keyword they pass to ``bind_current_process`` is in the configuration
  table (docs/site/binding.md), and every argument there is a real parameter;
* every passage about a process without a rank states the same rule, and
  that rule is what a process without a rank gets.

The recipes of docs/integrations.md are run by their own tests
(``tests/launchers/test_every_recipe_runs.py`` lists them).
"""

from __future__ import annotations

import inspect
import json
import os
import re
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Callable, Dict, List, Optional, Set, Tuple

import pytest

import pynumabind
from pynumabind import planner
from pynumabind.options import OptionKeywords

from ..support.cli_helpers import two_node_snapshot
from ..support.recipes import INTEGRATIONS, ROOT

README = ROOT / "README.md"
SITE = ROOT / "docs" / "site"
BINDING = SITE / "binding.md"  # the configuration table
CLI_PAGE = SITE / "cli.md"  # the commands and the options they all take
DOCS = (README, INTEGRATIONS, *sorted(SITE.glob("*.md")))
LAUNCHER_VARIABLES = (
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "SLURM_LOCALID",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE",
)

_FENCE = re.compile(r"^```([a-z]*)\n(.*?)^```$", re.M | re.S)


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _blocks(path: Path, language: str) -> List[str]:
    return [code for lang, code in _FENCE.findall(_text(path)) if lang == language]


def _block_with(path: Path, language: str, needle: str) -> str:
    found = [code for code in _blocks(path, language) if needle in code]
    assert len(found) == 1, f"{path.name}: expected one {language} block with {needle!r}"
    return found[0]


def _clean_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PYNUMABIND_") and k not in LAUNCHER_VARIABLES
    }
    env.update(extra or {})
    return env


def _python(code: str, env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=_clean_env(env),
        timeout=300,
        cwd=ROOT,
    )


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pynumabind", *args],
        capture_output=True,
        text=True,
        env=_clean_env(),
        timeout=300,
    )


# ------------------------------------------------------------ the test command


def _readme_command(needle: str) -> str:
    lines = _block_with(README, "sh", needle).strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def _readme_test_command() -> str:
    return _readme_command("-m pytest")


# A marked block of .ci/run: "# --- the README's NAME command, in a fresh venv ...", its
# lines, then a line of dashes.
_CI_BLOCK = re.compile(
    r"^# --- the README's ([a-z-]+) command, in a fresh venv.*?\n(.*?)^# -{10,}$", re.M | re.S
)


def test_ci_runs_the_readme_commands_verbatim_each_in_a_fresh_venv() -> None:
    """CI runs both README commands exactly as printed, each in a venv made just for it.

    Not in the system interpreter, whose site packages (and the modules its
    ``.pth`` files import) a user's fresh venv does not have.
    """
    ci = _text(ROOT / ".ci" / "run")
    readme = {
        "main-job": _readme_command("pynumabind check"),
        "test": _readme_test_command(),
    }
    blocks = _CI_BLOCK.findall(ci)
    assert sorted(name for name, _ in blocks) == sorted(readme), (
        ".ci/run needs one marked block for each of the README's commands"
    )
    # The venvs' parent: a new directory of this run's own.
    assert re.search(r'^venvs="\$\(mktemp -d [^)]*\)"$', ci, re.M), ci
    for name, body in blocks:
        commands = [line for line in body.splitlines() if line and not line.startswith("#")]
        assert commands == [
            f'python3 -m venv "$venvs/{name}"',
            f'source "$venvs/{name}/bin/activate"',
            readme[name],
            "deactivate",
        ], commands


def _optional_dependencies() -> Dict[str, List[str]]:
    text = _text(ROOT / "pyproject.toml")
    section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    return {
        name: re.findall(r'"([^"]+)"', value)
        for name, value in re.findall(r"^([a-z0-9-]+)\s*=\s*\[(.*?)\]", section, re.M | re.S)
    }


def test_readme_test_command_needs_nothing_but_pypi() -> None:
    """No local-version wheel (``torch==X+cpu``), no extra index or wheel directory."""
    extras = _optional_dependencies()
    for part in _readme_test_command().split("&&"):
        words = shlex.split(part)
        if words[:4] != ["python3", "-m", "pip", "install"]:
            continue
        for word in words[4:]:
            assert not re.match(r"-(f|i|-find-links|-index-url|-extra-index-url)\b", word), word
            assert "+" not in word, f"{word}: a local version is not on PyPI"
            project = re.fullmatch(r"\.\[([a-z0-9,-]+)\]", word)
            if project is None:
                continue
            for extra in project.group(1).split(","):
                assert extra in extras, f"{word}: pyproject.toml has no extra {extra!r}"
                for requirement in extras[extra]:
                    assert "+" not in requirement and "@" not in requirement, requirement


# ------------------------------------------------------------ quick start and examples


def test_quick_start_command_runs() -> None:
    block = _block_with(README, "sh", "pynumabind check").strip()
    install, command = (part.strip() for part in block.split("&&"))
    assert install.startswith("python3 -m pip install .")  # the install this test runs under
    words = shlex.split(command)
    assert words[0] == "pynumabind"
    result = _cli(*words[1:])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "bound as planned" in result.stdout


def test_using_it_example_runs_under_a_launcher_rank() -> None:
    """The example reads the rank from LOCAL_RANK, as its comment says; run it so."""
    code = _block_with(README, "python", "binding.verify().ok")
    assert "LOCAL_RANK" in code
    result = _python(code, {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"})
    assert result.returncode == 0, result.stderr
    assert "frozenset" in result.stdout  # the plan's CPUs and memory nodes were printed


def test_first_example_binds_with_a_rank() -> None:
    code = _block_with(README, "python", "bind_current_process(rank)")
    result = _python("rank = 0\n" + code + "\nassert binding.verify().ok\n")
    assert result.returncode == 0, result.stderr


def test_planning_example_runs() -> None:
    code = _block_with(README, "python", "plan_all(")
    result = _python("import pynumabind\n" + code)  # imported by the README's first example
    assert result.returncode == 0, result.stderr
    assert re.match(r"0 frozenset\(", result.stdout), result.stdout


def test_measured_binding_commands_run(tmp_path: Path) -> None:
    """The README's two commands: save this machine's record, then a worker follows it.

    Run as written, the record going to ``PYNUMABIND_ADVICE`` (not the
    system-wide file); one NUMA node here, so the record says "no
    measurable difference" and the worker runs unbound: the default policy.
    """
    block = _block_with(README, "sh", "PYNUMABIND_MODE=advised").strip()
    assert block.splitlines()[0].split("#")[0].split() == ["pynumabind", "advise", "--save"]
    record = tmp_path / "advice.json"
    script = block + "\npynumabind exec --rank 0 -- cat /proc/self/numa_maps\n"
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    result = subprocess.run(
        ["bash", "-e", "-c", script],
        capture_output=True,
        text=True,
        env=_clean_env({"PYNUMABIND_ADVICE": str(record), "PATH": path}),
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(record.read_text(encoding="utf-8"))
    assert {"recommendation", "machine"} <= set(document)
    policies = {line.split()[1] for line in result.stdout.splitlines() if "kernelpagesize" in line}
    if document["recommendation"]["bind"]:
        assert policies == {"prefer:0"}, result.stdout
    else:
        assert policies == {"default"}, result.stdout
    assert "WARNING" not in result.stderr


# ------------------------------------------------------------ commands and names


@cache
def _help(command: Optional[str] = None) -> str:
    result = _cli(*([command] if command else []), "--help")
    assert result.returncode == 0, result.stderr
    return result.stdout


def _commands() -> List[str]:
    return re.findall(r"^    ([a-z]+)\s", _help(), re.M)


def _named_commands() -> List[Tuple[str, str, str]]:
    """(document, command, rest) for every ```pynumabind COMMAND ...``` written in the docs."""
    found = []
    for path in DOCS:
        for command, rest in re.findall(r"`pynumabind ([a-z]+)([^`]*)`", _text(path)):
            found.append((path.name, command, rest))
    return found


def test_documented_commands_and_options_exist() -> None:
    commands = _commands()
    assert {"show", "plan", "exec", "check", "snapshot"} <= set(commands)
    named = _named_commands()
    assert len(named) >= 5
    for document, command, rest in named:
        assert command in commands, f"{document}: `pynumabind {command}` is no command"
        for option in re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", rest):
            assert re.search(rf"(?<![\w-]){re.escape(option)}\b", _help(command)), (
                f"{document}: `pynumabind {command}` has no option {option}"
            )


def test_documented_option_values_are_named_as_in_the_help() -> None:
    """``[--nprocs N]`` in the README is ``[--nprocs N]`` in ``pynumabind plan --help``."""
    pairs = 0
    for document, command, rest in _named_commands():
        for option, metavar in re.findall(r"\[(--?[a-z-]+) ([A-Z]+)\]", rest):
            usage = " ".join(_help(command).split("\n\n", 1)[0].split())
            assert f"[{option} {metavar}]" in usage, f"{document}: {command} {option} {metavar}"
            pairs += 1
    assert pairs >= 6


def test_every_command_takes_the_common_options() -> None:
    sentences = re.findall(
        r"Every\s+command(?:\s+except\s+((?:`\w+`(?:,|\s+and)?\s*)+))?\s+takes\s+(.*?)\.",
        _text(CLI_PAGE),
        re.S,
    )
    named: Set[str] = set()
    for excepted_text, options_text in sentences:
        excepted = set(re.findall(r"`(\w+)`", excepted_text))
        options = re.findall(r"--[a-z-]+", options_text)
        named.update(options)
        for command in _commands():
            if command in excepted:
                if options == ["--json"]:  # snapshot: refused there, so not in its help
                    assert "--json" not in _help(command), command
                continue
            for option in options:
                assert option in _help(command), f"`pynumabind {command}` lacks {option}"
    assert {"--topology", "--json"} <= named, sentences


def test_named_variables_scripts_and_tox_environments_exist() -> None:
    sources = "\n".join(
        p.read_text(encoding="utf-8")
        for base in ("src", ".ci")
        for p in (ROOT / base).rglob("*")
        if p.is_file() and p.suffix in ("", ".py")
    )
    # The test suite's own switch (no root setup) is defined where the suite reads it.
    sources += _text(ROOT / "tests" / "support" / "root_setup.py")
    tox = _text(ROOT / "tox.ini")
    for path in DOCS:
        text = _text(path)
        for name in set(re.findall(r"PYNUMABIND_[A-Z_]*[A-Z]", text)):
            assert f'"{name}"' in sources or f"{name}=" in sources, f"{path.name}: {name}"
        for env in set(re.findall(r"tox -e ([a-z-]+)", text)):
            assert f"[testenv:{env}]" in tox or env == "py", f"{path.name}: tox -e {env}"
        for script in set(re.findall(r"(?<![\w/])\.ci/([a-z-]+)", text)):
            assert os.access(ROOT / ".ci" / script, os.X_OK), f"{path.name}: .ci/{script}"


# ------------------------------------------------------------ arguments


def _configuration_arguments() -> Dict[str, str]:
    """The configuration table: argument name -> its cell (``(planner)`` if planner-only)."""
    table = _text(BINDING).split("## Configuration", 1)[1].strip().split("\n\n", 1)[0]
    arguments = {}
    for row in table.splitlines()[2:]:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        match = re.match(r"`([a-z_]+)", cells[1])
        if match:
            arguments[match.group(1)] = cells[1]
    return arguments


def _keywords(function: Callable[..., object]) -> Set[str]:
    """The keywords ``function`` takes: its parameters and the options' keywords."""
    named = {
        name
        for name, parameter in inspect.signature(function).parameters.items()
        if parameter.kind is not inspect.Parameter.VAR_KEYWORD
    }
    return named | set(OptionKeywords.__annotations__)


def test_configuration_table_names_real_parameters() -> None:
    binder = _keywords(pynumabind.bind_current_process)
    plan = _keywords(planner.plan)
    arguments = _configuration_arguments()
    assert {"rank", "nprocs", "mode", "policy", "gpu", "gpus"} <= set(arguments)
    for name, cell in arguments.items():
        where = plan if "(planner)" in cell else binder
        assert name in where, f"the configuration table: no parameter {name!r}"


def test_every_documented_keyword_is_in_the_configuration_table() -> None:
    """A keyword a recipe or section recommends is one the configuration table explains."""
    arguments = _configuration_arguments()
    binder = _keywords(pynumabind.bind_current_process)
    for path in DOCS:
        calls = re.findall(r"bind_current_process\(([^()]*)\)", _text(path))
        for keyword in {k for call in calls for k in re.findall(r"([a-z_]+)=", call)}:
            assert keyword in binder, f"{path.name}: bind_current_process has no {keyword}="
            assert keyword in arguments, f"{path.name}: {keyword}= is not in the table"


# ------------------------------------------------------------ a process without a rank

NO_RANK_RULE = "one: its node; several: the union; none: ConfigError"
#: What comes first without a rank: a nodes or cpus override of one entry is the placement.
ONE_PLACEMENT = "of one entry"
_NO_RANK = re.compile(r"without a rank|no rank|with none,|no launcher rank\)", re.I)


def _paragraphs(path: Path) -> List[str]:
    text = re.sub(r"\s+", " ", _text(path).replace("`", ""))
    text = text.replace("ConfigError: no local rank", "ConfigError")
    return re.split(r" (?=#)|(?<=\.) (?=[A-Z])", text)


def test_every_passage_about_no_rank_states_the_same_rule() -> None:
    """The docs once said both "raises ConfigError" and "binds to the GPUs it sees"."""
    passages = [(path.name, p) for path in DOCS for p in _paragraphs(path) if _NO_RANK.search(p)]
    assert len(passages) >= 3, passages
    for document, passage in passages:
        # The GPU rule, or the rule before it: an override of one entry is the placement.
        stated = NO_RANK_RULE in passage or "GPUs it sees" in passage
        assert stated or ONE_PLACEMENT in passage, (document, passage)
    placing = {d for d, p in passages if ONE_PLACEMENT in p}
    assert {BINDING.name, CLI_PAGE.name} <= placing, placing
    stated = [p for _, p in passages if NO_RANK_RULE in p]
    stating = {d for d, p in passages if NO_RANK_RULE in p}
    assert stating == {README.name, INTEGRATIONS.name, BINDING.name}
    assert stated


@pytest.mark.skipif(not {0, 1} <= os.sched_getaffinity(0), reason="needs CPUs 0 and 1")
@pytest.mark.parametrize(
    ("visible", "expected"),
    [("1", "1"), ("0,1", "0-1"), ("", "ConfigError: no local rank")],
    ids=["one: its node", "several: the union", "none: ConfigError"],
)
def test_the_no_rank_rule_holds(tmp_path: Path, visible: str, expected: str) -> None:
    """Each part of NO_RANK_RULE on a two-node machine (GPU 0 on CPU 0, GPU 1 on CPU 1)."""
    snapshot = two_node_snapshot(tmp_path / "two-node.json")
    code = (
        "import pynumabind\n"
        "try:\n"
        "    binding = pynumabind.bind_current_process()\n"
        "except pynumabind.ConfigError as exc:\n"
        "    print('ConfigError:', exc)\n"
        "else:\n"
        "    print(open('/proc/self/status').read().split('Cpus_allowed_list:')[1].split()[0])\n"
    )
    env = {"PYNUMABIND_TOPOLOGY": str(snapshot), "CUDA_VISIBLE_DEVICES": visible}
    result = _python(code, env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1].startswith(expected), result.stdout
