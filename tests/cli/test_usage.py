"""Usage errors exit 2 and name what was wrong, for every command; help describes each command.

The exit-status rule (docs/site/cli.md): a bad option value -- anything that
names something this machine lacks, a directory where a file belongs, a tree
that is not sysfs -- is a usage error, 2, one line on stderr; 1 is for a
machine or process that cannot do what valid options ask.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import shlex
import struct
import subprocess
import termios
from pathlib import Path
from typing import List, Optional

import pytest

from pynumabind.cli import COMMANDS, build_parser
from pynumabind.cli._parser import EXAMPLES

from ..support.childproc import child_command, run_in_child
from ..support.cli_helpers import assert_one_line_error, clean_env, run
from . import child_cli

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
def test_a_sysfs_root_that_is_no_sysfs_tree_is_a_usage_error(command: str, tmp_path: Path) -> None:
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


@pytest.mark.parametrize("columns", [None, "123", "0", "-5", "wide", ""])
@pytest.mark.parametrize("tty", [False, True], ids=["pipe", "terminal"])
def test_help_wraps_to_the_width_shutil_gives(columns: Optional[str], tty: bool) -> None:
    """The CLI's own terminal width (argparse's, without shutil) is shutil's, case by case.

    On a real terminal (a pty 97 columns wide) and on a pipe, with ``COLUMNS``
    unset, positive, zero, negative, not a number and empty.
    """
    env = clean_env()
    env.pop("COLUMNS", None)
    env.pop("LINES", None)
    if columns is not None:
        env["COLUMNS"] = columns
    if tty:
        leader, follower = pty.openpty()
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 97, 0, 0))
        try:
            command = child_command(child_cli.terminal_widths)
            subprocess.run(command, stdout=follower, env=env, timeout=60, check=True)
            ours, theirs = json.loads(os.read(leader, 1024).decode())
        finally:
            os.close(leader)
            os.close(follower)
    else:
        (ours, theirs), _ = run_in_child(child_cli.terminal_widths, env=env)
    assert ours == theirs
    if columns == "123":
        assert ours == 123
    elif tty:
        assert ours == 97


#: What ``exec`` must not load: JSON and the other commands' machinery, which it never runs.
EXEC_NEVER_LOADS = (
    "typing",
    "json",
    "dataclasses",
    "inspect",
    "shutil",
    "argparse",  # exec's usual line is read without it (cli._execline)
    "gettext",
    "locale",
    "pynumabind.cli._parser",
    "logging",  # a quiet exec sets up the CLI's handler only for a warning (cli._logs)
    "pynumabind.cli._logs",
    "pynumabind.advisor",
    "pynumabind.records.store",
    "pynumabind.records.report",
    "pynumabind.cli._report._gather",
)


def test_exec_loads_none_of_the_other_commands_machinery() -> None:
    """``pynumabind exec`` binds and replaces itself: the modules it loads on the way are counted.

    Each is a module loaded by ``main`` itself, up to the ``execvp`` (which the
    child replaces with a list of them); the standard-library ones are first
    dropped from ``sys.modules`` where a site hook loaded them.  ``--no-nvml``
    makes the CLI read the machine at full detail, HMAT included.
    """
    stdlib = [name for name in EXEC_NEVER_LOADS if not name.startswith("pynumabind")]
    loaded, _ = run_in_child(child_cli.modules_exec_loads, *stdlib, env=clean_env())
    assert "pynumabind.binding" in loaded  # it did bind
    assert not set(loaded) & set(EXEC_NEVER_LOADS), sorted(set(loaded) & set(EXEC_NEVER_LOADS))


def test_a_quiet_execs_warning_is_said_as_every_commands_and_main_leaves_logging_unset() -> None:
    """The CLI's handler, set up by the warning itself (no ``logging`` before it), then undone."""
    found, stderr = run_in_child(child_cli.quiet_exec_that_warns, env=clean_env())
    assert found == {"status": 127, "handlers": 0, "level": 0, "propagate": True}
    lines = stderr.strip().splitlines()
    assert lines[0] == "pynumabind: WARNING: a late warning"
    assert "no-such-program" in lines[1] and len(lines) == 2, lines


@pytest.mark.parametrize("command", COMMANDS)
def test_a_parser_for_one_command_parses_and_helps_as_the_full_one(command: str) -> None:
    """``main`` builds only the subparser of the command named first: nothing else changes."""
    words = [command, *_tail(command)]
    full, alone = build_parser(), build_parser(command)
    assert vars(alone.parse_args(words)) == vars(full.parse_args(words))
    subparsers = [
        action.choices[command]
        for parser in (full, alone)
        for action in parser._subparsers._group_actions  # type: ignore[union-attr]
    ]
    assert subparsers[0].format_help() == subparsers[1].format_help()
    assert set(alone._subparsers._group_actions[0].choices) == {command}  # type: ignore[union-attr]
