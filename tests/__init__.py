"""The test suite (a package tree; see tests/support/__init__.py for why)."""
