"""Environment rules (``pynumabind.discovery._environ``): pure, tested with plain dicts."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pynumabind.discovery import _environ
from pynumabind.discovery._environ import RANK_VARIABLES, parse_flag, resolve
from pynumabind.errors import ConfigError
from pynumabind.model import CpuMode, MemoryPolicy
from pynumabind.options import Options


def test_rank_variables_in_order_of_precedence() -> None:
    env = {"LOCAL_RANK": "3", "SLURM_LOCALID": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "2"}
    assert (resolve(env).rank, resolve(env).rank_source) == (3, "LOCAL_RANK")
    del env["LOCAL_RANK"]
    config = resolve(env)
    assert (config.rank, config.rank_source) == (2, "OMPI_COMM_WORLD_LOCAL_RANK")
    del env["OMPI_COMM_WORLD_LOCAL_RANK"]
    assert (resolve(env).rank, resolve(env).rank_source) == (1, "SLURM_LOCALID")


def test_mpirun_inside_a_slurm_batch_job_uses_the_open_mpi_rank() -> None:
    # mpirun in an sbatch script: every rank inherits the batch step's (or its
    # orted's) SLURM_LOCALID=0; only Open MPI's variable tells the ranks apart.
    env = {
        "SLURM_LOCALID": "0",
        "SLURM_NTASKS_PER_NODE": "4",
        "OMPI_COMM_WORLD_LOCAL_RANK": "2",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
    }
    config = resolve(env)
    assert (config.rank, config.rank_source) == (2, "OMPI_COMM_WORLD_LOCAL_RANK")
    assert (config.nprocs, config.nprocs_source) == (4, "OMPI_COMM_WORLD_LOCAL_SIZE")


def test_no_rank_lists_every_variable() -> None:
    with pytest.raises(ConfigError) as info:
        resolve({})
    for name in RANK_VARIABLES:
        assert name in str(info.value)


@pytest.mark.parametrize("value", ["", "-1", "+1", "1.0", "one", " ", "1 2", "0x1", "9" * 40])
def test_bad_rank_values_name_variable_and_value(value: str) -> None:
    with pytest.raises(ConfigError) as info:
        resolve({"LOCAL_RANK": value})
    assert "LOCAL_RANK" in str(info.value)
    assert repr(value) in str(info.value)


def test_surrounding_whitespace_is_tolerated() -> None:
    assert resolve({"LOCAL_RANK": " 2\n", "LOCAL_WORLD_SIZE": "4 "}).rank == 2


def test_sizes_come_from_the_ranks_own_launcher() -> None:
    config = resolve(
        {"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "8"}
    )
    assert (config.nprocs, config.nprocs_source) == (4, "LOCAL_WORLD_SIZE")
    config = resolve(
        {
            "OMPI_COMM_WORLD_LOCAL_RANK": "1",
            "LOCAL_WORLD_SIZE": "4",
            "OMPI_COMM_WORLD_LOCAL_SIZE": "8",
        }
    )
    assert (config.nprocs, config.nprocs_source) == (8, "OMPI_COMM_WORLD_LOCAL_SIZE")
    # torchrun's rank without its size: another launcher's size is not borrowed.
    assert resolve({"LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "8"}).nprocs is None


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({"SLURM_NTASKS_PER_NODE": "4"}, (4, "SLURM_NTASKS_PER_NODE")),
        ({"SLURM_TASKS_PER_NODE": "4"}, (4, "SLURM_TASKS_PER_NODE")),
        ({"SLURM_TASKS_PER_NODE": "4(x3)"}, (4, "SLURM_TASKS_PER_NODE")),
        ({"SLURM_TASKS_PER_NODE": "4(x2),4"}, (4, "SLURM_TASKS_PER_NODE")),
        ({"SLURM_TASKS_PER_NODE": "2(x3),1"}, (None, None)),  # differs per node: ambiguous
        ({"SLURM_NTASKS_PER_NODE": "2", "SLURM_TASKS_PER_NODE": "4"}, (2, "SLURM_NTASKS_PER_NODE")),
    ],
)
def test_slurm_sizes(variables: dict, expected: tuple) -> None:
    config = resolve({"SLURM_LOCALID": "0", **variables})
    assert (config.nprocs, config.nprocs_source) == expected


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("LOCAL_WORLD_SIZE", "0"),
        ("LOCAL_WORLD_SIZE", "two"),
        ("SLURM_TASKS_PER_NODE", "4(3)"),
        ("SLURM_TASKS_PER_NODE", "0"),
        ("SLURM_NTASKS_PER_NODE", "-4"),
    ],
)
def test_bad_sizes(name: str, value: str) -> None:
    rank = "SLURM_LOCALID" if name.startswith("SLURM") else "LOCAL_RANK"
    with pytest.raises(ConfigError) as info:
        resolve({rank: "0", name: value})
    assert name in str(info.value) and repr(value) in str(info.value)


def test_rank_must_be_below_size() -> None:
    with pytest.raises(
        ConfigError, match=r"local rank 4 \(from LOCAL_RANK\).*4 \(from LOCAL_WORLD"
    ):
        resolve({"LOCAL_RANK": "4", "LOCAL_WORLD_SIZE": "4"})


def test_options_from_environment() -> None:
    config = resolve(
        {
            "LOCAL_RANK": "0",
            "PYNUMABIND_MODE": "exclusive",
            "PYNUMABIND_POLICY": "Bind",
            "PYNUMABIND_NODES": "0-1,3",
            "PYNUMABIND_CPUS": "0-3,8",
        }
    )
    assert config.mode is CpuMode.EXCLUSIVE
    assert config.policy is MemoryPolicy.BIND
    # Per-rank overrides pass through as text: the planner parses them
    # against the topology (see test_binder for the variable-naming errors).
    assert config.nodes == "0-1,3" and config.cpus == "0-3,8"
    assert config.from_environment("nodes") == "PYNUMABIND_NODES"
    assert config.from_environment("cpus") == "PYNUMABIND_CPUS"
    assert config.from_environment("mode") == "PYNUMABIND_MODE"


def test_empty_options_count_as_unset() -> None:
    names = ("PYNUMABIND_MODE", "PYNUMABIND_POLICY", "PYNUMABIND_NODES", "PYNUMABIND_CPUS")
    config = resolve({"LOCAL_RANK": "0", **{n: "" for n in names}})
    assert (config.mode, config.policy, config.nodes, config.cpus) == (None, None, None, None)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("PYNUMABIND_MODE", "nodes"),
        ("PYNUMABIND_POLICY", "membind"),
        ("PYNUMABIND_DISABLE", "maybe"),
    ],
)
def test_bad_options_name_variable_and_value(name: str, value: str) -> None:
    with pytest.raises(ConfigError) as info:
        resolve({"LOCAL_RANK": "0", name: value})
    assert name in str(info.value) and repr(value) in str(info.value)


def test_hostile_long_value_is_cut_in_the_message() -> None:
    with pytest.raises(ConfigError) as info:
        resolve({"LOCAL_RANK": "0", "PYNUMABIND_MODE": "x" * 10_000})
    assert len(str(info.value)) < 300


def test_explicit_arguments_win() -> None:
    env = {
        "LOCAL_RANK": "not-a-number",  # never read: rank given
        "LOCAL_WORLD_SIZE": "8",
        "PYNUMABIND_MODE": "socket",
        "PYNUMABIND_POLICY": "interleave",
        "PYNUMABIND_NODES": "1",
        "PYNUMABIND_CPUS": "4",
    }
    given = Options.from_arguments(
        rank=1, nprocs=2, mode="node", policy="bind", nodes="0", cpus=[0, 1]
    )
    config = resolve(env, given)
    assert (config.rank, config.rank_source) == (1, "argument")
    assert (config.nprocs, config.nprocs_source) == (2, "argument")
    assert config.mode is CpuMode.NODE and config.policy is MemoryPolicy.BIND
    assert config.nodes == "0" and config.cpus == [0, 1]
    assert all(config.from_environment(o) is None for o in ("mode", "policy", "nodes", "cpus"))
    # With an explicit rank, the first launcher that sets a size is used.
    assert resolve({"OMPI_COMM_WORLD_LOCAL_SIZE": "3"}, Options(rank=0)).nprocs == 3


@pytest.mark.parametrize(
    "kwargs",
    [
        {"rank": -1},
        {"rank": True},
        {"rank": "0"},
        {"nprocs": 0},
        {"mode": "bogus"},
        {"policy": "bogus"},
    ],
)
def test_bad_arguments(kwargs: dict) -> None:
    with pytest.raises(ConfigError):
        resolve({"LOCAL_RANK": "0"}, Options.from_arguments(**kwargs))


@pytest.mark.parametrize("value", ["1", "true", "YES", "on", " On "])
def test_disable_true(value: str) -> None:
    config = resolve({"PYNUMABIND_DISABLE": value})  # no rank needed when disabled
    assert config.disabled and config.disabled_by == f"PYNUMABIND_DISABLE={value}"


@pytest.mark.parametrize("value", ["0", "false", "No", "off", ""])
def test_disable_false(value: str) -> None:
    config = resolve({"PYNUMABIND_DISABLE": value, "LOCAL_RANK": "0"})
    assert not config.disabled and config.disabled_by is None


def test_disabled_still_rejects_bad_values() -> None:
    with pytest.raises(ConfigError, match="PYNUMABIND_MODE"):
        resolve({"PYNUMABIND_DISABLE": "1", "PYNUMABIND_MODE": "bogus"})


@given(st.text(max_size=30))
def test_parse_flag_is_total(value: str) -> None:
    try:
        result = parse_flag("X", value)
    except ConfigError as exc:
        assert "X=" in str(exc)
    else:
        assert result is (value.strip().lower() in {"1", "true", "yes", "on"})


@given(
    st.dictionaries(st.sampled_from([*RANK_VARIABLES, "LOCAL_WORLD_SIZE"]), st.text(max_size=12))
)
def test_resolve_only_raises_config_errors(env: dict) -> None:
    try:
        config = resolve(env)
    except ConfigError:
        return
    assert config.rank is not None and config.rank >= 0


def test_launcher_sizes_share_the_one_nprocs_check() -> None:
    # The same limit as the nprocs argument and the planner, naming the variable.
    with pytest.raises(ConfigError, match=r"LOCAL_WORLD_SIZE 100000 exceeds the limit of 65536"):
        resolve({"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "100000"})
    with pytest.raises(ConfigError, match=r"nprocs 100000 exceeds the limit"):
        resolve({"LOCAL_RANK": "0"}, Options.from_arguments(nprocs=100000))


def test_options_are_built_once_and_carry_every_plan_input() -> None:
    config = resolve(
        {"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "PYNUMABIND_POLICY": "interleave"},
        Options(gpu=0, gpu_memory=True, interleave_nodes=[0]),  # type: ignore[arg-type]
    )
    assert isinstance(config, Options)
    assert (config.gpu, config.gpu_memory, config.interleave_nodes) == (0, True, frozenset({0}))
    assert config.environment_settings() == (
        "rank from LOCAL_RANK",
        "nprocs from LOCAL_WORLD_SIZE",
        "policy from PYNUMABIND_POLICY",
    )
    given = Options.from_arguments(nprocs=2, mode="exclusive", flags=True)
    merged = resolve({"LOCAL_RANK": "0", "PYNUMABIND_MODE": "socket"}, given)
    assert merged.mode is CpuMode.EXCLUSIVE and merged.sources["mode"] == "command line"
    with pytest.raises(ConfigError, match="--nprocs must be at least 1"):
        Options.from_arguments(nprocs=0, flags=True)


def test_require_node_from_the_environment() -> None:
    assert resolve({"LOCAL_RANK": "0"}).require_node is False
    config = resolve({"LOCAL_RANK": "0", "PYNUMABIND_REQUIRE_NODE": "yes"})
    assert config.require_node and config.from_environment("require_node") == (
        "PYNUMABIND_REQUIRE_NODE"
    )
    assert resolve({"LOCAL_RANK": "0"}, Options(require_node=True)).require_node
    with pytest.raises(ConfigError, match="PYNUMABIND_REQUIRE_NODE"):
        resolve({"LOCAL_RANK": "0", "PYNUMABIND_REQUIRE_NODE": "maybe"})


@pytest.mark.parametrize(
    "variable",
    [
        "PYNUMABIND_MODE",
        "PYNUMABIND_POLICY",
        "PYNUMABIND_DISABLE",
        "PYNUMABIND_REQUIRE_NODE",
        "LOCAL_WORLD_SIZE",
    ],
)
@pytest.mark.parametrize("value", ["\xa0", "\u2003", "\xa0node", "2\xa0"])
def test_non_ascii_whitespace_is_part_of_the_value_never_unset(variable: str, value: str) -> None:
    # str.strip() eats U+00A0: such a value used to count as unset, silently.
    with pytest.raises(ConfigError) as info:
        _environ.resolve({"LOCAL_RANK": "0", variable: value})
    assert f"{variable}=" in str(info.value)


@pytest.mark.parametrize("value", ["", " ", "\t\n"])
def test_an_empty_or_ascii_blank_value_still_counts_as_unset(value: str) -> None:
    config = _environ.resolve({"LOCAL_RANK": "0", "PYNUMABIND_MODE": value})
    assert config.mode is None and config.from_environment("mode") is None


def test_a_no_break_space_in_the_nodes_override_is_an_error_naming_it() -> None:
    from pynumabind import planner
    from pynumabind.discovery import detect_topology

    config = _environ.resolve({"LOCAL_RANK": "0", "PYNUMABIND_NODES": "\xa0"})
    with pytest.raises(ConfigError) as info:
        planner.plan_for(detect_topology(use_nvml=False), config)
    assert "PYNUMABIND_NODES" in str(info.value)


def test_weights_from_the_environment() -> None:
    config = resolve({"LOCAL_RANK": "0", "PYNUMABIND_WEIGHTS": " 2:1, 0:3\n"})
    assert config.weights == {0: 3, 2: 1} and list(config.weights) == [0, 2]
    assert config.from_environment("weights") == "PYNUMABIND_WEIGHTS"
    assert "weights from PYNUMABIND_WEIGHTS" in config.environment_settings()
    # The argument wins; blank is unset.
    assert resolve(
        {"LOCAL_RANK": "0", "PYNUMABIND_WEIGHTS": "0:3"}, Options(weights={1: 2})
    ).weights == {1: 2}
    for blank in ("", "  ", "\t"):
        assert resolve({"LOCAL_RANK": "0", "PYNUMABIND_WEIGHTS": blank}).weights is None


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("0:0", "weight out of range (from 1 to 255): '0' at position 2"),
        ("0=3", "expected NODE:WEIGHT"),
        ("0:3,0:1", "node 0 is given twice"),
        ("0:3,", "empty weights item"),
        ("0:\xa03", "expected ASCII digits"),  # a no-break space is no blank
    ],
)
def test_bad_weights_variable_is_a_config_error_naming_it(value: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        resolve({"LOCAL_RANK": "0", "PYNUMABIND_WEIGHTS": value})
    assert str(info.value).startswith(f"invalid PYNUMABIND_WEIGHTS={value!r}: ")
    assert words in str(info.value)
    assert "give NODE:WEIGHT items such as 0:3,2:1 (weights 1 to 255)" in str(info.value)
