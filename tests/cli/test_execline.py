"""``exec``'s line read without argparse (cli._execline) is argparse's reading, or none.

argparse is the reference: the exec subparser's options are :data:`OPTIONS`'
(the same destinations, kinds, choices and defaults), and on any line,
generated or written here, :func:`read` returns argparse's namespace or
``None`` -- never a namespace argparse would not give, nor one for a line
argparse refuses.  The lines ``exec`` is given in practice are read, so the
argparse-free path is the one they take (what ``main`` then loads:
``test_usage``'s ``EXEC_NEVER_LOADS``).
"""

from __future__ import annotations

import argparse
from typing import Any, Dict, List, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pynumabind.cli import UsageError, build_parser, main
from pynumabind.cli._execline import COUNT, EXACT, FLAG, INT, LOWER, OPTIONS, TEXT, read


def _exec_parser() -> argparse.ArgumentParser:
    parser = build_parser("exec")
    subparsers = parser._subparsers._group_actions[0]  # type: ignore[union-attr]
    return subparsers.choices["exec"]  # type: ignore[no-any-return]


def _argparse(words: List[str]) -> Optional[Dict[str, Any]]:
    """argparse's namespace for the line, or ``None`` where it refuses it (as ``main`` does)."""
    try:
        args, extras = build_parser("exec").parse_known_args(words)
    except UsageError:
        return None
    return None if extras else vars(args)


def _kind(action: argparse.Action) -> str:
    if isinstance(action, argparse._StoreTrueAction):
        return FLAG
    if isinstance(action, argparse._CountAction):
        return COUNT
    if action.type is int:
        return INT
    if action.type is str.lower:
        return LOWER
    assert action.type is None, action
    return EXACT if action.choices else TEXT


def test_the_table_holds_exactly_the_exec_parsers_options() -> None:
    found = {}
    for action in _exec_parser()._actions:
        if not action.option_strings or action.dest == "help":
            continue  # the command (argv) and --help: argparse's alone
        choices = tuple(action.choices or ())
        for option in action.option_strings:
            found[option] = (action.dest, _kind(action), choices, action.default)
    assert found == OPTIONS


USUAL = [
    ["exec", "--rank", "0", "--", "python", "train.py"],
    ["exec", "--nodes", "1", "--", "CMD"],
    ["exec", "--nodes", "1", "--policy", "bind", "--", "numactl-free", "-x", "--y"],
    ["exec", "--rank=3", "--mode=Socket", "--policy", "INTERLEAVE", "--", "c"],
    ["exec", "-vv", "--json", "--on-error", "warn", "--no-nvml", "--", "c", "--", "d"],
    ["exec", "-v", "--verbose", "--cpus", "0-3;4-7", "--nprocs", "2", "--", "c"],
    ["exec", "--topology", "/x.json", "--allowed-cpus", "0-1", "--allowed-mems", "0", "--", "c"],
    ["exec", "--sysfs-root", "/t", "--fallback", "nearest", "--tiers", "all", "--", "c"],
    ["exec", "--policy", "weighted-interleave", "--weights", "0:3,1:1", "--interleave-nodes",
     "0,1", "--set-system-weights", "--", "c"],
    ["exec", "--nodes", "", "--", "c"],
    ["exec", "--"],
    ["exec", "--", "--", "c"],
]  # fmt: skip


@pytest.mark.parametrize("words", USUAL, ids=lambda words: " ".join(words[1:]))
def test_the_usual_lines_are_read_as_argparse_reads_them(words: List[str]) -> None:
    args = read(words)
    assert args is not None
    assert vars(args) == _argparse(words)


REFUSED_OR_ARGPARSES = [
    ["exec", "--rank", "x", "--", "c"],  # argparse names the bad value
    ["exec", "--mode", "compact", "--", "c"],
    ["exec", "--on-error", "WARN", "--", "c"],  # exact choices: argparse refuses it
    ["exec", "--no-n", "--", "c"],  # abbreviation: argparse's rules
    ["exec", "--rank", "0", "--rank", "1", "--", "c"],
    ["exec", "--topology", "a", "--sysfs-root", "b", "--", "c"],
    ["exec", "--rank", "-1", "--", "c"],
    ["exec", "--json=1", "--", "c"],
    ["exec", "--rank", "0", "c", "--nodes", "1"],  # no "--": REMAINDER's rules
    ["exec", "--help"],
    ["exec", "--rank"],
    ["show", "--", "c"],
    [],
]


@pytest.mark.parametrize("words", REFUSED_OR_ARGPARSES, ids=lambda words: " ".join(words[1:]))
def test_other_lines_go_to_argparse(words: List[str]) -> None:
    assert read(words) is None


def test_main_reads_a_refused_line_with_argparse_and_says_why(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["exec", "--rank", "x", "--", "true"]) == 2
    assert capsys.readouterr().err == "pynumabind: error: argument --rank: invalid int value: 'x'\n"


_WORDS = st.sampled_from(
    [
        *sorted(OPTIONS),
        *["--", "-", "-vv", "-vx", "--no-n", "--rank=2", "--mode=NODE", "--tiers=", "--help"],
        *["cmd", "0", "1", "-1", " 2", "1_0", "x", "", "SOCKET", "node", "warn", "Raise"],
        *["nearest", "all", "bind", "preferred", "weighted-interleave", "0:3", "a=b"],
        *["--nodes=1", "--weights=0:1"],
    ]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_WORDS, max_size=8), st.lists(_WORDS, max_size=3), st.booleans())
def test_any_line_is_read_as_argparse_reads_it_or_not_at_all(
    options: List[str], command: List[str], separated: bool
) -> None:
    words = ["exec", *options, *(["--"] if separated else []), *command]
    args = read(words)
    if args is not None:
        assert vars(args) == _argparse(words)
