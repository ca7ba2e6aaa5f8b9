"""Usage errors exit 2 and name what was wrong, for every command; help describes each command.

The exit-status rule (docs/site/cli.md): a bad option value -- anything that
names something this machine lacks, a directory where a file belongs, a tree
that is not sysfs -- is a usage error, 2, one line on stderr; 1 is for a
machine or process that cannot do what valid options ask.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import List

import pytest

from pynumabind.cli import COMMANDS, EXAMPLES, build_parser

from ..support.cli_helpers import assert_one_line_error, run

#: Every command but advise and report takes the machine options (both are of this machine only).
MACHINE_COMMANDS = [c for c in COMMANDS if c not in ("advise", "report")]


def _tail(command: str) -> List[str]:
    """What a command needs after its options to be otherwise valid."""
    return ["--rank", "0", "--", "true"] if command == "exec" else []


@pytest.mark.parametrize("args", [["--bogus"], ["-v"], ["--bogus", "show"]])
def test_a_stray_argument_before_the_command_is_named(args: List[str]) -> None:
    """``pynumabind --bogus`` used to say only that a command was missing."""
    assert_one_line_error(run(*args), 2, "unrecognized arguments", args[0])


@pytest.mark.parametrize("command", list(COMMANDS))
def test_an_unknown_option_of_any_command_is_named(command: str) -> None:
    result = run(command, "--bogus", *(["--", "true"] if command == "exec" else []))
    assert_one_line_error(result, 2, "unrecognized arguments: --bogus")


@pytest.mark.parametrize("command", MACHINE_COMMANDS)
def test_a_sysfs_root_that_is_no_sysfs_tree_is_a_usage_error(
    command: str, tmp_path: Path
) -> None:
    """It exited 1 ("no CPU information under ..."), unlike a file that is not a snapshot."""
    result = run(command, "--sysfs-root", str(tmp_path), *_tail(command))
    assert_one_line_error(result, 2, "--sysfs-root", str(tmp_path), "no CPU information")


@pytest.mark.parametrize("command", MACHINE_COMMANDS)
@pytest.mark.parametrize(
    ("option", "value", "words"),
    [
        ("--topology", "{dir}", ["topology file", "Is a directory"]),
        ("--topology", "{dir}/missing.json", ["topology file", "No such file"]),
        ("--allowed-cpus", "60000", ["--allowed-cpus", "not online"]),
        ("--allowed-mems", "x", ["--allowed-mems", "malformed"]),
    ],
)
def test_every_machine_option_value_error_is_a_usage_error(
    command: str, option: str, value: str, words: List[str], tmp_path: Path
) -> None:
    result = run(command, option, value.format(dir=tmp_path), *_tail(command))
    assert_one_line_error(result, 2, *words)


@pytest.mark.parametrize(
    ("where", "words"),
    [
        ("{dir}", ["snapshot -o", "is a directory"]),
        ("{dir}/missing/snapshot.json", ["snapshot -o", "does not exist"]),
        ("", ["snapshot -o", "empty"]),
    ],
)
def test_snapshot_output_naming_no_writable_file_is_a_usage_error(
    where: str, words: List[str], tmp_path: Path
) -> None:
    """``snapshot -o /tmp`` exited 1 ("Is a directory") after reading the whole machine."""
    assert_one_line_error(run("snapshot", "-o", where.format(dir=tmp_path)), 2, *words)


def test_snapshot_refuses_json_instead_of_ignoring_it(tmp_path: Path) -> None:
    """A snapshot is JSON always; ``--json`` was accepted and did nothing."""
    assert_one_line_error(run("snapshot", "--json"), 2, "--json", "JSON already")
    assert "--json" not in run("snapshot", "--help").stdout
    written = tmp_path / "machine.json"
    assert run("snapshot", "-o", str(written)).returncode == 0 and written.exists()


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_help_has_a_description(command: str) -> None:
    result = run(command, "--help")
    assert result.returncode == 0, result.stderr
    usage, description = result.stdout.split("\n\n")[:2]
    assert usage.startswith(f"usage: pynumabind {command}")
    assert not description.startswith("options:"), result.stdout
    assert len(description.split()) >= 8, description


def test_top_level_help_shows_examples_that_parse() -> None:
    result = run("--help")
    assert result.returncode == 0 and "examples:" in result.stdout
    assert EXAMPLES.strip() in result.stdout  # as written: not re-wrapped
    examples = [
        line.split("   ")[0].strip() for line in EXAMPLES.splitlines() if "  pynumabind " in line
    ]
    assert len(examples) >= 3
    parser = build_parser()
    for example in examples:
        words = shlex.split(example)[1:]
        args, extras = parser.parse_known_args(words)
        assert args.command in COMMANDS and not extras, example
