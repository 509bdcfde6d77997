"""The estimator core imports only torch and numpy (no trainer, no I/O libraries)."""

import subprocess
import sys

ALLOWED_THIRD_PARTY = {"torch", "numpy", "mrgrpo"}


def test_core_imports_only_torch_and_numpy():
    code = (
        "import sys; before = set(sys.modules); import mrgrpo.estimators, mrgrpo.diagnostics; "
        "print('\\n'.join(sorted({m.split('.')[0] for m in set(sys.modules) - before})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    stdlib = set(sys.stdlib_module_names)
    third_party = {m for m in out if m not in stdlib and not m.startswith("_")}
    # torch pulls in its own dependencies (sympy, jinja2, ...) lazily or not; they are torch's.
    forbidden = {"trl", "transformers", "datasets", "accelerate", "rich", "typer", "yaml", "pydantic", "matplotlib"}
    assert not (third_party & forbidden), third_party & forbidden
    assert {"torch", "numpy", "mrgrpo"} <= set(out) | {"mrgrpo"}
