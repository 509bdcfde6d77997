"""The ``scaled`` suite: any suite with some components rescaled (the scale experiments).

``{suite: scaled, options: {base: math, scales: {length: 10}, ...}}`` builds suite ``base`` with
the remaining options and multiplies the named components' values *and* declared ranges by their
factor (> 0); weights and every other component are unchanged. Estimators that normalize each
component first (GDPO, SA-MRPO, CorrGRPO with ``numerator="standardized"``) are blind to such a
rescaling; GRPO's weighted total is not: this is how the experiments make one component dominate.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mrgrpo.errors import ConfigError
from mrgrpo.rewards.base import RewardComponent, RewardSuite, get_suite, register_suite, suite_info


def _scaled(component: RewardComponent, factor: float) -> RewardComponent:
    def fn(prompts: list, completions: list, **columns: Any) -> list[float | None]:
        return [None if v is None else factor * v for v in component(prompts, completions, **columns)]

    lo, hi = component.range
    return RewardComponent(component.name, (factor * lo, factor * hi), fn)


@register_suite("scaled")
def scaled_suite(base: str, scales: Mapping[str, float], tokenizer: Any = None, **options: Any) -> RewardSuite:
    """Suite ``base`` (built with ``options``) with components multiplied by ``scales``."""
    if suite_info(base, where="rewards.options.base").takes_tokenizer:  # an unknown name: UnknownNameError
        options["tokenizer"] = tokenizer
    inner = get_suite(base, **options)
    unknown = sorted(set(scales) - set(inner.names))
    if unknown:
        raise ConfigError(f"rewards.options.scales: unknown component(s) {unknown}; suite {base!r} has {list(inner.names)}")
    components = []
    for component in inner.components:
        factor = float(scales.get(component.name, 1.0))
        if not factor > 0:
            raise ConfigError(f"rewards.options.scales.{component.name} must be > 0, got {factor}")
        components.append(component if factor == 1.0 else _scaled(component, factor))
    # named as registered: the train job records a suite's name as the run's `rewards.suite`
    return RewardSuite("scaled", tuple(components), tuple(inner.weights))
