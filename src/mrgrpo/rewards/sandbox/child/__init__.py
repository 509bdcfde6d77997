"""What runs inside the sandbox processes (the launcher, each judge, each candidate).

These modules are never imported by those processes from this package: :func:`bootstrap_code`
reads them as source, compiles them once in the caller and the launcher stub
(:data:`mrgrpo.rewards.sandbox.launcher.STUB_PREFIX`) executes each, in :data:`MODULES` order,
as a module of a private package ``_mrgrpo_sandbox`` of a fresh ``python -I -S`` interpreter
(nothing of the trainer's environment or ``site-packages`` is loaded there). Each module names
what it uses from the others with ordinary relative imports, which resolve in both places.

* ``wire``: the plain-data encoding and the judge's restricted decoder (also imported by the
  caller's tests);
* ``io``: message framing, fd plumbing, ``prctl``;
* ``confine``: the candidate's isolation layers (namespaces, private root, rlimits, Landlock,
  seccomp);
* ``candidate``: the untrusted side (audit guards, serving the judge's requests);
* ``judge``: the trusted side (runs the tests, decodes replies, writes the verdict lines);
* ``boot``: the entry points (launcher, judge server, direct start).
"""

from __future__ import annotations

import marshal
from functools import lru_cache
from pathlib import Path

#: The modules, each after those it imports from.
MODULES = ("wire", "io", "confine", "candidate", "judge", "boot")
#: The name of the package they form inside the sandbox processes.
PACKAGE = "_mrgrpo_sandbox"


@lru_cache(maxsize=1)
def bootstrap_code() -> bytes:
    """The marshalled tuple of ``(module name, code object)`` the sandbox interpreters run."""
    here = Path(__file__).parent
    return marshal.dumps(
        tuple(
            (name, compile((here / f"{name}.py").read_text(), f"<mrgrpo-sandbox-{name}>", "exec", dont_inherit=True))
            for name in MODULES
        )
    )
