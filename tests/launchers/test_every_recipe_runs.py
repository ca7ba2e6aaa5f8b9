"""The launcher pages stay tested: every recipe (``docs/site/*.md``) is run by a
test, and the claims their prose makes that need a GPU are checked on a recorded machine."""

from __future__ import annotations

import dataclasses
import re

import pytest

from pynumabind import planner

from ..support.recipes import FRAMEWORKS, ROOT, SITE, recipe_pages, recipes
from ..support.topology_builders import dgx_h100


def test_every_recipe_is_run_by_a_test() -> None:
    found = recipes()
    assert {"torchrun", "slurm", "slurm-worker", "multiprocessing"} <= set(found)
    sources = "\n".join(p.read_text() for p in (ROOT / "tests").rglob("test_*.py"))
    for name, (language, _) in found.items():
        call = f'recipe("{name}"' + (")" if language == "python" else f', "{language}")')
        assert call in sources, f"no test runs the {name!r} recipe of {recipe_pages()[name]}"


def test_readme_links_the_recipes() -> None:
    """The README links the frameworks page, which links every page with a recipe."""
    readme = (ROOT / "README.md").read_text()
    # An absolute link: PyPI shows the README as the long description.
    assert re.search(r"\]\(https://github\.com/[^)]+/blob/main/docs/site/frameworks\.md\)", readme)
    linked = set(re.findall(r"\]\((\w+\.md)\)", FRAMEWORKS.read_text()))
    for page in set(recipe_pages().values()):
        assert page.relative_to(SITE).as_posix() in linked, f"frameworks.md lacks {page.name}"


def test_each_launcher_page_starts_with_what_to_add() -> None:
    """A launcher page opens with what to add to a launch; explanation comes after."""
    for page in set(recipe_pages().values()):
        lines = page.read_text().splitlines()
        assert lines[0].startswith("# ") and lines[2] == "## What to add to your launch", page


def test_slurm_one_gpu_per_task() -> None:
    """The Slurm section's claims for tasks that see only their own GPU.

    DGX H100, task 5 of 8 under ``--gpus-per-task=1``: the task sees GPU 5
    alone, as its device 0.  Node mode binds it to GPU 5's node (1) either way,
    with a wrap-around warning unless ``gpu=0``; exclusive mode slices node 1
    among all 8 tasks (14 CPUs) where default visibility gives 28.
    """
    full = dgx_h100()
    alone = dataclasses.replace(full, gpus=(full.gpus[5],))
    by_rank = planner.plan(alone, 5, 8)
    by_device = planner.plan(alone, 5, 8, gpu=0)
    for plan in (by_rank, by_device):
        assert plan.gpu is not None and plan.gpu_info.pci_bus_id == full.gpus[5].pci_bus_id
        assert plan.node == 1
        assert plan.cpus == full.nodes[1].cpus
    assert any("wrap around" in w for w in by_rank.warnings)
    assert by_device.warnings == ()
    exclusive = planner.plan(alone, 5, 8, gpu=0, mode="exclusive").cpus
    default_visibility = planner.plan(full, 5, 8, mode="exclusive").cpus
    assert exclusive is not None and default_visibility is not None
    assert (len(exclusive), len(default_visibility)) == (14, 28)


@pytest.mark.parametrize("name", ["torchrun", "slurm-worker", "multiprocessing"])
def test_python_recipes_compile(name: str) -> None:
    language, code = recipes()[name]
    assert language == "python"
    compile(code, f"{recipe_pages()[name]}:{name}", "exec")
