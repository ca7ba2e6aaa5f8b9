"""Sphinx configuration of pynumabind's reference site.

Built against the installed package (``pip install '.[docs]'``), never a
path hack, so the reference and the doctests describe what users install:

    sphinx-build -W --keep-going -b html docs/site build/site
    sphinx-build -W --keep-going -b doctest docs/site build/doctest

``.ci/release-checks`` runs both.
"""

from __future__ import annotations

import pynumabind

project = "pynumabind"
author = "pynumabind developers"
copyright = "pynumabind developers"  # noqa: A001
release = pynumabind.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.doctest",
    "sphinx.ext.napoleon",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# Types from the signatures go into each entry's parameter list and return type.
autodoc_typehints = "description"
autodoc_typehints_description_target = "all"
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "show-inheritance": True}
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "alabaster"
html_title = f"pynumabind {release}"

# The doctests read the snapshots the package ships (load_topology("example:NAME")),
# from any directory.
doctest_global_setup = """
import pynumabind
"""
