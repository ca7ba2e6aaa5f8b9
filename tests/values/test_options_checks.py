"""``Options.__post_init__``: every field given is checked and normalised, once per object.

The checks run from a table (``options._CHECKS``) and only for the fields
given; these pin that each field still gets its check, with the CLI's
``--`` spelling where it had one, and that ``replace`` checks again.
"""

from __future__ import annotations

from typing import Any, Dict

import pytest

from pynumabind import CpuMode, MemoryPolicy, Options
from pynumabind._record import replace
from pynumabind.errors import ConfigError

BAD = [
    ({"rank": -1}, "invalid rank argument -1", "invalid --rank argument -1"),
    ({"nprocs": 0}, "nprocs must be at least 1", "--nprocs must be at least 1"),
    ({"mode": "nodes"}, "mode", "mode"),
    ({"policy": "membind"}, "policy", "policy"),
    ({"gpu": "1"}, "gpu must be an integer", "gpu must be an integer"),
    ({"rank_gpus": "01"}, "rank_gpus must be a sequence", "rank_gpus must be a sequence"),
    ({"gpus": [0, "1"]}, "GPU index must be an integer", "GPU index must be an integer"),
    ({"local_gpus": 3}, "local_gpus must be a sequence", "local_gpus must be a sequence"),
    ({"interleave_nodes": [0, -1]}, "interleave_nodes entry -1", "interleave_nodes entry -1"),
    ({"weights": "0:0"}, "weights", "--weights"),
    ({"fallback": "closest"}, "invalid fallback 'closest'", "invalid --fallback 'closest'"),
    ({"tiers": "some"}, "invalid tiers 'some'", "invalid --tiers 'some'"),
    ({"gpu_memory": 1}, "gpu_memory must be True or False", "gpu_memory must be True or False"),
    ({"priority_cores": None}, "priority_cores must be True", "priority_cores must be True"),
]


@pytest.mark.parametrize(("given", "message", "flagged"), BAD)
def test_each_field_given_is_checked(given: Dict[str, Any], message: str, flagged: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Options(**given)
    with pytest.raises(ConfigError, match=flagged):
        Options(flags=True, **given)
    with pytest.raises(ConfigError, match=message):
        replace(Options(), **given)  # replace checks again


def test_fields_given_are_normalised_and_the_rest_left_as_defaults() -> None:
    options = Options(
        rank=1,
        mode="SOCKET",
        policy="Bind",
        rank_gpus=[0, 1],
        gpus=None,
        interleave_nodes=[1, 0],
        weights="1:2,0:3",
        fallback=" Nearest ",
        tiers="ALL",
    )
    assert options.mode is CpuMode.SOCKET and options.policy is MemoryPolicy.BIND
    assert options.rank_gpus == (0, 1) and options.interleave_nodes == frozenset({0, 1})
    assert dict(options.weights or {}) == {0: 3, 1: 2} and list(options.weights or {}) == [0, 1]
    assert (options.fallback, options.tiers) == ("nearest", "all")
    assert options.rank_source == "argument" and options.nprocs_source is None
    assert options.sources == {"mode": "argument", "policy": "argument"}
    assert Options() == Options(rank=None, sources={})
    assert replace(options, rank=0).mode is CpuMode.SOCKET
