"""Shared fixtures of the verl integration tests."""

import pytest


@pytest.fixture(autouse=True)
def _launcher_environment_restored(monkeypatch):
    """``launch.prepare`` writes ``VERL_USE_EXTERNAL_MODULES`` into this process's environment (the
    Ray workers it starts inherit it); each test starts without it and leaves none behind, so a
    user module named by one test never reaches another test's subprocess."""
    # setenv first: it records the variable's absence, so the undo removes what a test wrote
    # (a bare delenv of an absent variable records nothing and would leave it behind)
    monkeypatch.setenv("VERL_USE_EXTERNAL_MODULES", "")
    monkeypatch.delenv("VERL_USE_EXTERNAL_MODULES")
