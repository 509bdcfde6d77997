"""What every test runs under, whoever starts the suite (a terminal, ``make test &``, CI).

* **The hub is offline.** ``HF_HUB_OFFLINE=1``, ``HF_DATASETS_OFFLINE=1`` and
  ``TRANSFORMERS_OFFLINE=1`` are set here, before any test module imports ``huggingface_hub``,
  ``datasets`` or ``transformers``, and every subprocess a test starts inherits them: mrgrpo
  downloads nothing at run time, so a test that needed a download fails instead of fetching.
* **One thread per xdist worker.** Under ``pytest -n N`` (``make test`` runs two workers on its
  two cores) each worker, and every process it starts, computes with one thread
  (``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` 1, set before any test imports torch): two workers of
  two threads each on two cores make OpenMP wait for the busy core, several times slower. Each
  worker also has its own temporary directory (``TMPDIR``), so a test that checks what a run
  left behind sees only its own worker's files.
* **A skip cannot hide a broken install.** With ``CI=true`` (or ``1``/``yes``),
  ``pytest.importorskip`` of a module whose top-level package *is* installed, but which fails to
  import, fails the test instead of skipping it (:func:`importorskip`); tests that import an
  optional dependency by hand call :func:`importorskip` too. Without ``CI``, such a test skips
  with the import error as its reason, as before.
"""

from __future__ import annotations

import atexit
import importlib
import importlib.util
import os
import shutil
import tempfile
from typing import Any

import pytest

OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
os.environ.update(OFFLINE)
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if _WORKER:
    for _threads in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_threads] = "1"
    # a temporary directory per worker (world-writable and sticky like /tmp, for the sandbox's
    # unprivileged modes): tests that check what a run leaves in it see only their own worker's
    _TMP = os.path.join(tempfile.gettempdir(), f"mrgrpo-tests-{os.getppid()}-{_WORKER}")
    os.makedirs(_TMP, exist_ok=True)
    os.chmod(_TMP, 0o1777)
    os.environ["TMPDIR"] = _TMP
    tempfile.tempdir = None
    atexit.register(shutil.rmtree, _TMP, ignore_errors=True)

_pytest_importorskip = pytest.importorskip


def in_ci() -> bool:
    """Whether ``CI`` says this is a CI run (``true``, ``1`` or ``yes``, any case)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def installed(module: str) -> bool:
    """Whether the top-level package of ``module`` is installed (found without importing it)."""
    try:
        return importlib.util.find_spec(module.split(".")[0]) is not None
    except (ImportError, ValueError):
        return False


def importorskip(modname: str, minversion: str | None = None, reason: str | None = None, **kwargs: Any) -> Any:
    """``pytest.importorskip``, except that under CI an installed package that fails to import (any
    exception, not only ``ImportError``) fails the test. Not installed: a skip, as always."""
    if not installed(modname):
        return _pytest_importorskip(modname, minversion, reason, **kwargs)
    try:
        importlib.import_module(modname)
    except Exception as error:  # noqa: BLE001 - whatever breaks the import
        if in_ci():
            pytest.fail(
                f"{modname} is installed but does not import ({type(error).__name__}: {error}); "
                "under CI=true this fails instead of skipping",
                pytrace=False,
            )
        pytest.skip(reason or f"{modname} is installed but does not import: {error}", allow_module_level=True)
    return _pytest_importorskip(modname, minversion, reason, **kwargs)  # imported: checks minversion


pytest.importorskip = importorskip  # every test file's importorskip goes through the CI rule
