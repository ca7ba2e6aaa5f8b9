"""The recipes of the launcher pages (``docs/site/*.md``), and reading a process from outside.

* :func:`recipe` returns the code block that follows ``<!-- recipe: NAME -->``
  in a page of the site (``docs/site/torchrun.md``, ``slurm.md`` ...), unchanged:
  the recipe tests run exactly what users read.  A name appears once in the site.
* :func:`observe` reads another process's CPUs (every thread), and its memory
  policy, from ``/proc/PID/``: what the kernel says, not what the process
  reports about itself.

The memory policy comes from ``/proc/PID/numa_maps``: for a mapping without a
policy of its own (the heap, the stack, the libraries) the kernel prints the
task's policy, in its own words (``bind:0``, ``prefer:0``, ``interleave:0-1``,
``default``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Tuple

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "docs" / "site"
# The page that tells what each launcher and framework needs, and links the pages with the recipes.
FRAMEWORKS = SITE / "frameworks.md"

_MARKER = re.compile(r"^<!-- recipe: ([a-z0-9-]+) -->\n```([a-z]+)\n(.*?)^```$", re.M | re.S)


def recipe_pages() -> Dict[str, Path]:
    """Every recipe's page: name -> the site page that holds it."""
    return {name: page for page, found in _by_page().items() for name in found}


def _by_page() -> Dict[Path, Dict[str, Tuple[str, str]]]:
    pages: Dict[Path, Dict[str, Tuple[str, str]]] = {}
    for page in sorted(SITE.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        found: Dict[str, Tuple[str, str]] = {}
        for match in _MARKER.finditer(text):
            name, language, code = match.groups()
            found[name] = (language, code)
        # A marker not followed directly by a fenced block would go unnoticed.
        markers = re.findall(r"<!-- recipe: ([^ ]+) -->", text)
        if sorted(markers) != sorted(found):
            raise AssertionError(
                f"{page}: markers {sorted(markers)} but code blocks for {sorted(found)}"
            )
        if found:
            pages[page] = found
    return pages


def recipes() -> Dict[str, Tuple[str, str]]:
    """Every recipe in the site: name -> (language, code)."""
    found: Dict[str, Tuple[str, str]] = {}
    for page, on_page in _by_page().items():
        for name, value in on_page.items():
            if name in found:
                raise AssertionError(f"{page}: recipe {name!r} appears twice in the site")
            found[name] = value
    return found


def recipe(name: str, language: str = "python") -> str:
    """The code of recipe ``name``, checked to be in ``language``."""
    try:
        found_language, code = recipes()[name]
    except KeyError:
        raise AssertionError(f"no page of {SITE} has a recipe {name!r}") from None
    assert found_language == language, (name, found_language)
    return code


@dataclass(frozen=True)
class Observed:
    """What ``/proc`` says about one process."""

    pid: int
    cpus: str  # the main thread's Cpus_allowed_list
    thread_cpus: Tuple[str, ...]  # every thread's, sorted and deduplicated
    threads: int
    policy: str  # the task's memory policy as numa_maps prints it


def _status_field(path: str, name: str) -> str:
    with open(path, encoding="ascii") as handle:
        for line in handle:
            if line.startswith(name + ":"):
                return line.split(":", 1)[1].strip()
    raise AssertionError(f"{path} has no {name}")


def _task_policy(pid: int) -> str:
    """The policy numa_maps shows for mappings that have none of their own.

    Lines read ``ADDRESS POLICY [details]``; a mapping with its own policy
    (``mbind``) would show that one, so the most common value is the task's.
    """
    counts: Dict[str, int] = {}
    with open(f"/proc/{pid}/numa_maps", encoding="ascii", errors="replace") as handle:
        for line in handle:
            fields = line.split()
            if len(fields) >= 2:
                counts[fields[1]] = counts.get(fields[1], 0) + 1
    if not counts:
        raise AssertionError(f"/proc/{pid}/numa_maps is empty")
    return max(counts, key=lambda policy: counts[policy])


def observe(pid: int) -> Observed:
    """Read ``pid``'s CPUs, every thread's CPUs and its memory policy from /proc."""
    cpus = _status_field(f"/proc/{pid}/status", "Cpus_allowed_list")
    per_thread: List[str] = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            per_thread.append(_status_field(f"/proc/{pid}/task/{tid}/status", "Cpus_allowed_list"))
        except FileNotFoundError:  # the thread ended while we looked
            continue
    return Observed(
        pid=pid,
        cpus=cpus,
        thread_cpus=tuple(sorted(set(per_thread))),
        threads=len(per_thread),
        policy=_task_policy(pid),
    )
