"""Test-only helpers: fake peers and fixtures shared by the test modules."""
