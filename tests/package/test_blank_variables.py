"""One rule for blank variables: a blank ``PYNUMABIND_*`` value counts as unset, everywhere.

Kubernetes and Slurm templates export a variable they have no value for as
``NAME=""`` (or as a few blanks).  Every variable the package reads is
walked here: the list is the environment page's (docs/site/environment.md,
which ``test_site.py`` keeps equal to what ``src/`` names), and each variable
has a probe that reads it the way the package does, in each place that reads
it (the environment merge, the advice record's path, the framework hooks, the
advisor).  For every one, a blank value must give what no value gives, and a
real value something else (so that the probe does read the variable).
"""

from __future__ import annotations

import re
import types
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Tuple

import pytest

from pynumabind.discovery import _environ
from pynumabind.options import ASCII_SPACE, Options, environ_value
from pynumabind.records import _paths

ENVIRONMENT = Path(__file__).resolve().parents[2] / "docs" / "site" / "environment.md"

#: What templates leave: empty, and blanks of every ASCII kind.
BLANKS = ["", " ", "\t", "  \t\n", ASCII_SPACE]

Probe = Callable[[Mapping[str, str]], object]


def _merged(env: Mapping[str, str]) -> Options:
    """The environment merge every bind, plan and check goes through."""
    return _environ.resolve(env, Options(), need_rank=False)


def _advice_paths(env: Mapping[str, str]) -> Tuple[List[str], str]:
    home = {"HOME": "/home/probe", **env}
    return _paths.read_paths(home), _paths.save_path(home)


def _hook_fallback(env: Mapping[str, str]) -> object:
    from pynumabind.integrations._common import hook_fallback

    return hook_fallback(env)


def _gate(variable: str) -> Probe:
    def probe(env: Mapping[str, str]) -> object:
        from pynumabind.integrations import gate

        return gate(variable, env)

    return probe


def _vllm_launch(env: Mapping[str, str]) -> object:
    """What vLLM's launching process reads: the opt-in and whether mode advised is asked."""
    from pynumabind.integrations import _vllm_launch

    config = types.SimpleNamespace(worker_cls="auto")
    return _vllm_launch.opt_ins(config, env), _vllm_launch.advised(env)


def _guest_note(env: Mapping[str, str], monkeypatch: pytest.MonkeyPatch) -> object:
    from pynumabind import advisor
    from pynumabind._os import cpuinfo

    monkeypatch.setattr(cpuinfo, "hypervisor", lambda: False)  # only the variable decides
    with monkeypatch.context() as scoped:
        scoped.delenv("PYNUMABIND_IN_GUEST", raising=False)
        for name, value in env.items():
            scoped.setenv(name, value)
        return advisor._virtualization_note("/sys")


def _set_system_weights(env: Mapping[str, str]) -> object:
    """The CLI's ``--set-system-weights`` check: weights from --weights or the variable."""
    from pynumabind.cli import UsageError, _check_system_weights

    args = types.SimpleNamespace(weights=None, set_system_weights=True)
    try:
        _check_system_weights(args, env)  # type: ignore[arg-type]
    except UsageError as exc:
        return str(exc)
    return "weights given"


#: variable -> (a value that changes what the probes see, the probes).
PROBES: Dict[str, Tuple[str, List[Probe]]] = {
    "PYNUMABIND_MODE": ("advised", [_merged, _vllm_launch]),
    "PYNUMABIND_POLICY": ("bind", [_merged]),
    "PYNUMABIND_NODES": ("0", [_merged]),
    "PYNUMABIND_CPUS": ("0", [_merged]),
    "PYNUMABIND_LOCAL_GPUS": ("0-1", [_merged]),
    "PYNUMABIND_PRIORITY_CORES": ("1", [_merged]),
    "PYNUMABIND_REQUIRE_NODE": ("1", [_merged]),
    "PYNUMABIND_FALLBACK": ("error", [_merged, _hook_fallback]),
    "PYNUMABIND_WEIGHTS": ("0:1", [_merged, _set_system_weights]),
    "PYNUMABIND_TIERS": ("all", [_merged]),
    "PYNUMABIND_DISABLE": ("1", [_merged]),
    "PYNUMABIND_TOPOLOGY": ("/srv/snapshot.json", [_merged, _environ.topology_file]),
    "PYNUMABIND_ADVICE": ("/srv/advice.json", [_advice_paths]),
    "PYNUMABIND_VLLM": ("1", [_gate("PYNUMABIND_VLLM"), _vllm_launch]),
    "PYNUMABIND_SGLANG": ("1", [_gate("PYNUMABIND_SGLANG")]),
    "PYNUMABIND_IN_GUEST": ("1", []),  # read from os.environ: probed below
}


def _described() -> List[str]:
    """The definition terms of the environment page: every variable the package reads."""
    text = ENVIRONMENT.read_text(encoding="utf-8")
    return re.findall(r"^`(PYNUMABIND_[A-Z_]*[A-Z])`$", text, re.M)


def test_every_variable_has_a_probe() -> None:
    assert sorted(PROBES) == sorted(_described())


def test_the_environment_page_states_the_rule() -> None:
    text = " ".join(ENVIRONMENT.read_text(encoding="utf-8").split())
    assert "One rule for blank values holds for every `PYNUMABIND_*` variable" in text
    assert "an empty value, or one of only ASCII whitespace, counts as unset" in text


@pytest.mark.parametrize("variable", sorted(PROBES))
@pytest.mark.parametrize("blank", BLANKS, ids=repr)
def test_blank_is_unset(variable: str, blank: str, monkeypatch: pytest.MonkeyPatch) -> None:
    value, probes = PROBES[variable]
    if variable == "PYNUMABIND_IN_GUEST":
        probes = [lambda env: _guest_note(env, monkeypatch)]
    for probe in probes:
        unset = probe({})
        assert probe({variable: blank}) == unset, (variable, blank, probe)
        assert probe({variable: value}) != unset, (variable, value, probe)  # the probe reads it


def test_the_one_rule() -> None:
    assert environ_value({}, "X") is None
    for blank in BLANKS:
        assert environ_value({"X": blank}, "X") is None
    assert environ_value({"X": " a "}, "X") == " a "  # as set: the caller trims and quotes
    assert environ_value({"X": "\u00a0"}, "X") == "\u00a0"  # not ASCII: a value (and its error)
