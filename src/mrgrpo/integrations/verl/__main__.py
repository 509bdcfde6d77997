"""``python -m mrgrpo.integrations.verl``: see :mod:`mrgrpo.integrations.verl.launch`.

What this entry point adds around the launcher:

* ``--help`` / ``-h`` says how to choose an mrgrpo estimator and configure ``algorithm.mrgrpo``
  (its keys and what they mean, read from :class:`~mrgrpo.integrations.verl.config.MrgrpoVerlConfig`,
  where they are documented once); verl's own settings stay behind ``--cfg job``.
* A user error (a misspelled ``algorithm.mrgrpo`` key, a bad value, a missing extra) is one line,
  ``error: ...``, and exit status 2, through :func:`mrgrpo.command_errors.reporting_user_errors`:
  here for what fails before the Hydra job, inside the job (:func:`~mrgrpo.integrations.verl.launch.main`)
  for what :func:`~mrgrpo.integrations.verl.launch.prepare` refuses, where Hydra would otherwise
  print "Error executing job" and a traceback. ``MRGRPO_DEBUG=1`` shows the traceback.
"""

from __future__ import annotations

import dataclasses
import re
import sys
import textwrap

from mrgrpo.command_errors import reporting_user_errors

USAGE = "usage: python -m mrgrpo.integrations.verl [--config-path DIR --config-name NAME] [HYDRA OVERRIDES ...]"


def attribute_help(doc: str, limit: int = 360) -> dict[str, str]:
    """``{attribute: its description}`` from the ``Attributes:`` section of a docstring: the first
    sentence, and the next ones while the whole stays within ``limit`` characters."""
    section = doc.split("Attributes:", 1)[1] if "Attributes:" in doc else ""
    found: dict[str, list[str]] = {}
    current = None
    for line in section.splitlines():
        match = re.match(r"^\s{4,8}(\w+): (.*)$", line)
        if match and (current is None or len(line) - len(line.lstrip()) <= 8):
            current = match.group(1)
            found[current] = [match.group(2).strip()]
        elif current and line.strip():
            found[current].append(line.strip())
    out = {}
    for key, parts in found.items():
        sentences = re.split(r"(?<=[.])\s+(?=[A-Z\"`(])", " ".join(parts).replace("``", ""))
        kept = sentences[:1]
        for sentence in sentences[1:]:  # the next sentences while they fit (a choice's options, say)
            if len(" ".join([*kept, sentence])) > limit:
                break
            kept.append(sentence)
        out[key] = " ".join(kept)
    return out


def help_text() -> str:
    """What ``--help`` prints: the estimator choice and every ``algorithm.mrgrpo`` key."""
    import mrgrpo
    from mrgrpo.integrations.verl.config import MrgrpoVerlConfig

    described = attribute_help(MrgrpoVerlConfig.__doc__ or "")
    names = ", ".join(f"mrgrpo_{n}" for n in mrgrpo.available_estimators())
    lines = [
        USAGE,
        "",
        "verl's main_ppo (the same config and Hydra overrides) with mrgrpo's estimators loaded in every Ray worker.",
        "",
        "Choose the estimator:  algorithm.adv_estimator=mrgrpo_<name>",
        *textwrap.wrap(f"names: {names} (`mrgrpo estimators` lists their options)", 100, initial_indent="  ",
                       subsequent_indent="  "),
        "",
        "Configure it under algorithm.mrgrpo (prefix + where the composed config has no such key yet,",
        "e.g. +algorithm.mrgrpo.suite=math +algorithm.mrgrpo.weights=[1,0.5,0.5]):",
    ]
    for field in dataclasses.fields(MrgrpoVerlConfig):
        default = field.default if field.default_factory is dataclasses.MISSING else field.default_factory()
        head = f"  {field.name} (default {default!r}): "
        lines += textwrap.wrap(described.get(field.name, ""), 100, initial_indent=head, subsequent_indent=" " * 6)
    lines += [
        "",
        "Every mrgrpo setting is checked before Ray starts; a mistake is one line `error: ...` and exit status 2",
        "(MRGRPO_DEBUG=1 shows the traceback). A worked config: examples/verl/mrgrpo_math.yaml",
        "(--config-path examples/verl --config-name mrgrpo_math). verl's own settings: add --cfg job to print the",
        "composed config; Hydra's flags: --hydra-help. More: docs/verl.md.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> None:
    """Print the help, or run the launcher with user errors reported as one line."""
    if any(arg in ("--help", "-h") for arg in argv):
        sys.stdout.write(help_text())
        return
    with reporting_user_errors():  # errors before the Hydra job (the job reports its own the same way)
        from mrgrpo.integrations.verl.launch import main as launch

        launch()


if __name__ == "__main__":
    main(sys.argv[1:])
