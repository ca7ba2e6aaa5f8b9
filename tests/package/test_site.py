"""The reference site (``docs/site``), read from its sources.

Sphinx itself builds the site with warnings as errors in ``.ci/release-checks``
(``pip install '.[docs]'``); these checks need nothing but the test extra:

* every name in ``pynumabind.__all__`` has an entry in the reference, and
  every public function's docstring says what it returns and what it raises;
* every ``PYNUMABIND_*`` variable the library reads is described on the
  environment page, and the page describes no variable the library does not read;
* the topic pages exist and are in the table of contents, and the glossary
  defines the vocabulary;
* the doctest blocks run here too (with :mod:`doctest`, as Sphinx's doctest
  builder runs them) against the snapshot they read, and that snapshot is what
  ``pynumabind snapshot`` writes for the recorded DGX H100 of ``tests/machines``;
* every ``pynumabind COMMAND --option`` the pages name exists;
* the CHANGELOG has a dated section for this version, and neither it nor
  ``src/`` cites issue numbers;
* docs/site/api.md lists exactly ``pynumabind.__all__``, a line each;
* the README links are absolute (PyPI shows it as the long description), and
  those into the repository name files that exist.
"""

from __future__ import annotations

import doctest
import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Set

import pytest

import pynumabind

from ..support.recipes import ROOT
from ..support.sysfs_tree import build_sysfs

SITE = ROOT / "docs" / "site"
EXAMPLES = ROOT / "src" / "pynumabind" / "discovery" / "examples"  # shipped: example:NAME
REFERENCE = SITE / "reference.rst"
ENVIRONMENT = SITE / "environment.md"
GLOSSARY = SITE / "glossary.md"
TOPICS = (
    "binding",
    "frameworks",
    "advise",
    "placement",
    "cli",
    "environment",
    "troubleshooting",
    "glossary",
    "development",
)
VOCABULARY = ("policy", "mode", "gpu", "gpus", "copies", "node", "rank")

_DOCTEST = re.compile(r"^```\{doctest\}\n(.*?)^```$", re.M | re.S)


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _pages() -> List[Path]:
    return sorted(SITE.glob("*.md")) + sorted(SITE.glob("*.rst"))


# ------------------------------------------------------------ the reference


def _documented() -> Set[str]:
    """Names with an entry of their own in the reference (``.. autoX:: pynumabind.NAME``)."""
    return set(
        re.findall(
            r"^\.\. (?:auto(?:function|class|exception|data)|py:data):: pynumabind\.(\w+)\s*$",
            _text(REFERENCE),
            re.M,
        )
    )


def test_every_public_name_is_in_the_reference() -> None:
    missing = sorted(set(pynumabind.__all__) - _documented())
    assert not missing, f"docs/site/reference.rst lacks {missing}"


def test_every_public_function_says_what_it_returns_and_raises() -> None:
    """Parameters and their types come from the signature; these two sections from the docstring."""
    functions = [
        name for name in pynumabind.__all__ if inspect.isfunction(getattr(pynumabind, name))
    ]
    assert {"bind_current_process", "plan", "bind_memory", "advise"} <= set(functions)
    for name in functions:
        doc = inspect.getdoc(getattr(pynumabind, name)) or ""
        for section in ("Returns:", "Raises:"):
            assert re.search(rf"^{section}$", doc, re.M), f"pynumabind.{name}: no {section} section"


def _args_section(doc: str) -> Set[str]:
    """The names an ``Args:`` section describes (``name:``, ``**keywords:``)."""
    match = re.search(r"^Args:\n((?:    .*\n|\n)+)", doc + "\n", re.M)
    return set(re.findall(r"^    \**(\w+):", match.group(1), re.M)) if match else set()


def test_every_parameter_of_a_public_function_is_described() -> None:
    functions = [
        name for name in pynumabind.__all__ if inspect.isfunction(getattr(pynumabind, name))
    ]
    for name in functions:
        function = getattr(pynumabind, name)
        described = _args_section(inspect.getdoc(function) or "")
        parameters = set(inspect.signature(function).parameters)
        missing = sorted(parameters - described)
        assert not missing, f"pynumabind.{name}: its Args: section lacks {missing}"
        assert not described - parameters, f"pynumabind.{name}: {described - parameters}"


def test_the_reference_documents_only_public_names() -> None:
    """An entry for a name the package no longer exports would fail the build, or mislead."""
    extra = sorted(_documented() - set(pynumabind.__all__))
    assert not extra, f"docs/site/reference.rst documents {extra}, not in pynumabind.__all__"


# ------------------------------------------------------------ environment variables


def _variables_in_source() -> Set[str]:
    return {
        name
        for path in (ROOT / "src" / "pynumabind").rglob("*.py")
        for name in re.findall(r"PYNUMABIND_[A-Z_]*[A-Z]", _text(path))
    }


def _variables_described() -> Set[str]:
    """The definition terms of the environment page: a line that is just ```NAME```."""
    return set(re.findall(r"^`(PYNUMABIND_[A-Z_]*[A-Z])`$", _text(ENVIRONMENT), re.M))


def test_every_variable_the_library_reads_is_described() -> None:
    in_source = _variables_in_source()
    assert {"PYNUMABIND_MODE", "PYNUMABIND_TOPOLOGY", "PYNUMABIND_DISABLE"} <= in_source
    missing = sorted(in_source - _variables_described())
    assert not missing, f"docs/site/environment.md does not describe {missing}"


def test_the_environment_page_describes_only_variables_the_library_reads() -> None:
    named = set(re.findall(r"PYNUMABIND_[A-Z_]*[A-Z]", _text(ENVIRONMENT)))
    stale = sorted(named - _variables_in_source())
    assert not stale, f"docs/site/environment.md names {stale}, which nothing in src/ reads"


# ------------------------------------------------------------ pages


def _toctree_entries() -> List[str]:
    blocks = re.findall(r"^```\{toctree\}\n(.*?)^```$", _text(SITE / "index.md"), re.M | re.S)
    return [
        line.strip()
        for block in blocks
        for line in block.splitlines()
        if line.strip() and not line.startswith(":")
    ]


def test_topic_pages_exist_and_are_in_the_table_of_contents() -> None:
    entries = _toctree_entries()
    assert set(TOPICS) | {"reference"} <= set(entries), entries
    for entry in entries:
        assert (SITE / f"{entry}.md").is_file() or (SITE / f"{entry}.rst").is_file(), entry
    pages = {path.stem for path in _pages()} - {"index"}
    assert pages == set(entries), f"pages outside the table of contents: {pages - set(entries)}"


def test_the_glossary_defines_the_vocabulary() -> None:
    terms = set(re.findall(r"^`([a-z_]+)`$", _text(GLOSSARY), re.M))
    missing = sorted(set(VOCABULARY) - terms)
    assert not missing, f"docs/site/glossary.md does not define {missing}"


def test_the_site_uses_the_vocabulary() -> None:
    """The names the glossary retired appear on no page (``memory=``, ``--memory``, ...)."""
    # SGLang's own ``sgl.Engine(device="cpu")``, which the SGLang page quotes, is not ours.
    retired = re.compile(
        r"\bmemory=|--memory\b|PYNUMABIND_MEMORY|--no-gpu\b|\bgpus=(?:True|False)|"
        r"(?<!Engine\()\bdevices?=|Plan\.devices?\b|\.mempolicy\b"
    )
    for path in _pages():
        for number, line in enumerate(_text(path).splitlines(), 1):
            assert not retired.search(line), f"{path.name}:{number}: {line}"


# ------------------------------------------------------------ doctests


def _doctest_pages() -> Dict[str, str]:
    return {
        path.name: "\n".join(_DOCTEST.findall(_text(path)))
        for path in _pages()
        if _DOCTEST.search(_text(path))
    }


def test_the_pages_have_doctests() -> None:
    pages = _doctest_pages()
    assert {"binding.md", "cli.md"} <= set(pages), sorted(pages)


@pytest.mark.parametrize("page", sorted(_doctest_pages()))
def test_doctests_run(page: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each page's doctest blocks, in order, in one namespace: as Sphinx's doctest builder."""
    for name in list(os.environ):
        if name.startswith("PYNUMABIND_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)  # the examples are read from any directory
    source = _doctest_pages()[page]
    test = doctest.DocTestParser().get_doctest(
        source, {"pynumabind": pynumabind}, page, str(SITE / page), 0
    )
    assert test.examples, page
    flags = doctest.ELLIPSIS | doctest.IGNORE_EXCEPTION_DETAIL | doctest.DONT_ACCEPT_TRUE_FOR_1
    runner = doctest.DocTestRunner(optionflags=flags)
    runner.run(test)
    results = runner.summarize(verbose=False)
    assert results.failed == 0, f"{page}: {results.failed} of {results.attempted} failed"


@pytest.mark.parametrize(
    ("example", "machine"), [("dgx-h100", "dgx_h100"), ("gb200-nvl-tray", "gb200_nvl_tray")]
)
def test_the_shipped_examples_are_the_recorded_machines(
    example: str, machine: str, tmp_path: Path
) -> None:
    """Each shipped ``example:NAME`` is ``pynumabind snapshot`` of its ``tests/machines`` record."""
    tree = build_sysfs(machine, tmp_path / "sys")
    written = tmp_path / f"{example}.json"
    command = ["snapshot", "--sysfs-root", str(tree), "--no-nvml", "-o", str(written)]
    result = subprocess.run(
        [sys.executable, "-m", "pynumabind", *command],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith("PYNUMABIND_")},
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(_text(written)) == json.loads(_text(EXAMPLES / f"{example}.json"))


def test_the_examples_are_package_data_read_from_any_directory(tmp_path: Path) -> None:
    """The installed package holds them (importlib.resources), and pyproject ships them."""
    from pynumabind.discovery import example_topologies

    names = example_topologies()
    assert names == sorted(path.stem for path in EXAMPLES.glob("*.json")) and len(names) >= 2
    pyproject = _text(ROOT / "pyproject.toml")
    assert re.search(r'^pynumabind = \[.*"discovery/examples/\*\.json".*\]$', pyproject, re.M)
    assert "graft src/pynumabind/discovery/examples" in _text(ROOT / "MANIFEST.in")
    result = subprocess.run(
        [sys.executable, "-m", "pynumabind", "plan", "--topology", "example:dgx-h100", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if not k.startswith("PYNUMABIND_")},
    )
    assert result.returncode == 0, result.stderr
    assert len(json.loads(result.stdout)["ranks"]) == 8


def test_an_unknown_example_is_a_usage_error_listing_the_examples(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pynumabind", "plan", "--topology", "example:dgx-h1000"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if not k.startswith("PYNUMABIND_")},
    )
    assert result.returncode == 2, result.stderr
    assert "example:dgx-h100, example:gb200-nvl-tray" in result.stderr, result.stderr
    (tmp_path / "example:mine").write_text(_text(EXAMPLES / "dgx-h100.json"))
    assert pynumabind.load_topology(str(tmp_path / "example:mine")).gpus


# ------------------------------------------------------------ commands


def test_the_commands_and_options_the_pages_name_exist() -> None:
    named = [
        (path.name, command, rest)
        for path in _pages()
        for command, rest in re.findall(r"`pynumabind ([a-z]+)([^`]*)`", _text(path))
    ]
    assert len(named) >= 6
    helps: Dict[str, str] = {}
    for page, command, rest in named:
        if command not in helps:
            result = subprocess.run(
                [sys.executable, "-m", "pynumabind", command, "--help"],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert result.returncode == 0, f"{page}: `pynumabind {command}`: {result.stderr}"
            helps[command] = result.stdout
        options = re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", rest.split(" -- ")[0])
        for option in options:
            assert re.search(rf"(?<![\w-]){re.escape(option)}\b", helps[command]), (
                f"{page}: `pynumabind {command}` has no option {option}"
            )


# ------------------------------------------------------------ the release


def test_the_changelog_has_a_section_for_this_version() -> None:
    """Keep a Changelog: ``## [Unreleased]``, then ``## [X.Y.Z] - YYYY-MM-DD`` with its link."""
    text = _text(ROOT / "CHANGELOG.md")
    assert "keepachangelog.com" in text
    versions = re.findall(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", text, re.M)
    assert versions[0] == ("Unreleased", ""), versions
    assert (pynumabind.__version__, versions[1][1]) in versions[1:], versions
    for version, _ in versions:
        assert re.search(rf"^\[{re.escape(version)}\]: https://", text, re.M), version


_TICKET = re.compile(r"\bissues? #?\d+|\(#\d+\)|(?<![\w&])#\d+\b", re.I)


#: Citations of another project's public tracker (where a recorded figure comes from).
EXTERNAL_TRACKERS = ("numactl issue #",)


def test_no_issue_numbers_in_the_source_or_the_changelog() -> None:
    """Comments, docstrings and the changelog say the reason, not the ticket."""
    paths = [
        *sorted((ROOT / "src").rglob("*.py")),
        *sorted((ROOT / "tests").rglob("*.py")),
        ROOT / "CHANGELOG.md",
    ]
    for path in paths:
        if ".cache" in path.parts:
            continue
        for number, line in enumerate(_text(path).splitlines(), 1):
            if any(source in line for source in EXTERNAL_TRACKERS):
                continue
            assert not _TICKET.search(line), f"{path.relative_to(ROOT)}:{number}: {line.strip()}"


# ------------------------------------------------------------ the README


# PyPI shows README.md as the package's long description, where a relative link
# resolves against pypi.org and breaks: every link is absolute, and each one into
# the repository (pyproject's Source URL) names a file or folder of this checkout.
_LINK = re.compile(r"\]\(([^)\s]+)\)|<(https?://[^>\s]+)>|^\[[^\]]+\]:\s*(\S+)", re.M)


def _source_url() -> str:
    found = re.search(r'^Source = "([^"]+)"$', _text(ROOT / "pyproject.toml"), re.M)
    assert found, "pyproject.toml's [project.urls] has no Source"
    return found.group(1)


def _readme_links() -> List[str]:
    return [next(g for g in groups if g) for groups in _LINK.findall(_text(ROOT / "README.md"))]


def test_the_readme_links_are_absolute_for_its_pypi_page() -> None:
    links = _readme_links()
    assert len(links) >= 5, links
    relative = [link for link in links if not re.match(r"https?://", link)]
    assert not relative, f"README.md has relative links, which break on PyPI: {relative}"


def test_the_readme_links_into_the_repository_name_files_that_exist() -> None:
    prefix = re.compile(re.escape(_source_url()) + r"/(?:blob|tree)/main/([^#?]+)")
    into_repository = [m.group(1) for m in map(prefix.match, _readme_links()) if m]
    site = [path for path in into_repository if path.startswith("docs/site/")]
    assert len(site) >= 5, f"README.md links to too few site pages: {into_repository}"
    for path in into_repository:
        assert (ROOT / path).exists(), f"README.md links to {path}, which does not exist"


def test_the_link_check_sees_a_relative_link() -> None:
    """The pattern finds a relative link, so the absolute-links test can fail."""
    text = "see [a](sub/x.md) and <https://e.org> and\n[b]: https://f.org/"
    assert [next(g for g in groups if g) for groups in _LINK.findall(text)] == [
        "sub/x.md",
        "https://e.org",
        "https://f.org/",
    ]


# ------------------------------------------------------------ the start page

LAUNCHERS = ("torchrun", "Slurm", "vLLM", "SGLang", "Ray")


def test_the_start_page_shows_install_check_and_launchers_on_one_screen() -> None:
    """Read as Markdown, its first 40 lines hold the install, the check and a line per launcher."""
    screen = "\n".join(_text(SITE / "index.md").splitlines()[:40])
    assert "python3 -m pip install . && pynumabind check" in screen, screen
    for launcher in LAUNCHERS:
        line = re.search(rf"^- \*\*{launcher}\*\*: .*\]\(([^)]+)\)", screen, re.M)
        assert line, f"index.md's first 40 lines have no line for {launcher}"
        page = line.group(1).partition("#")[0]
        assert (SITE / page).is_file(), line.group(0)
        assert "How it works" not in screen[: screen.index(line.group(0))]


def test_no_page_tells_users_to_install_from_pypi_before_a_release() -> None:
    """``pip install pynumabind`` fails until a release is published: say "once released"."""
    for path in (ROOT / "README.md", *_pages()):
        lines = _text(path).splitlines()
        for number, line in enumerate(lines, 1):
            if re.search(r"pip install pynumabind\b", line):
                near = " ".join(lines[max(0, number - 2) : number]).lower()
                assert "once a release is published" in near, f"{path.name}:{number}: {line}"


_ROLE_OR_LITERAL = re.compile(r":[a-z]+:`[^`]*`|``[^`]*``")


@pytest.mark.parametrize("name", sorted(n for n in pynumabind.__all__ if n != "__version__"))
def test_the_returns_section_does_not_read_as_a_type(name: str) -> None:
    """napoleon reads ``X: text`` on a Returns line as the type ``X``: prose would render
    as the return type ("Return type: The Binding").  The type comes from the annotation."""
    found = getattr(pynumabind, name)
    if isinstance(found, type):
        return
    doc = inspect.getdoc(found) or ""
    lines = doc.splitlines()
    for index, line in enumerate(lines[:-1]):
        if line.strip() == "Returns:":
            first = _ROLE_OR_LITERAL.sub("x", lines[index + 1])
            assert not re.search(r":(\s|$)", first), f"{name}: {lines[index + 1].strip()}"


# ------------------------------------------------------------ the public API as Markdown


def test_the_api_page_lists_every_public_name_once_with_a_line() -> None:
    """docs/site/api.md, read on the forge as plain Markdown, is ``pynumabind.__all__``."""
    items = re.findall(
        r"^- \[?`(\w+)`(?:\]\(#pynumabind\.(\w+)\))?: (\S.*)$", _text(SITE / "api.md"), re.M
    )
    listed = [name for name, _, _ in items]
    assert sorted(listed) == sorted(pynumabind.__all__), (
        f"missing: {sorted(set(pynumabind.__all__) - set(listed))}, "
        f"extra: {sorted(set(listed) - set(pynumabind.__all__))}"
    )
    assert len(listed) == len(set(listed)), "a name is listed twice"
    for name, anchor, line in items:
        assert anchor in ("", name), f"{name} links to pynumabind.{anchor}"
        assert len(line) > 10, f"{name}: no description"
