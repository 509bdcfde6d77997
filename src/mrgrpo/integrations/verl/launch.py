"""``python -m mrgrpo.integrations.verl [verl arguments]``: verl's ``main_ppo`` with mrgrpo loaded.

Takes exactly what ``python -m verl.trainer.main_ppo`` takes (``--config-path``,
``--config-name``, Hydra overrides) and composes the same config (verl's ``ppo_trainer`` by
default). Before handing it to verl's own ``main`` it

1. imports the modules named in ``algorithm.mrgrpo.import`` (a user's own estimators), then
   binds an ``mrgrpo_*`` estimator to its settings (``algorithm.mrgrpo``: keys, components, option
   names and values, ``reward_ranges``, weights it cannot use; and, when verl will resume, the
   estimator state saved in that checkpoint), so a typo or a bad value fails now and not
   after the first rollout;
2. checks that the trainer verl will run can see the components (``trainer.use_v1=true``, verl's
   default, needs the ``transferqueue`` package);
3. adds the user's modules and ``mrgrpo.integrations.verl`` to ``VERL_USE_EXTERNAL_MODULES`` in
   this process and in the Ray runtime env of every worker
   (``ray_kwargs.ray_init.runtime_env.env_vars``), so the trainer actor, wherever Ray places it,
   imports them when it imports verl.

This is the one entry point a user changes: ``python -m verl.trainer.main_ppo ...`` becomes
``python -m mrgrpo.integrations.verl ...`` (or set that environment variable in the runtime env
yourself, as ``examples/verl/mrgrpo_math.yaml`` also does).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from mrgrpo.command_errors import reporting_user_errors
from mrgrpo.errors import ConfigError, MissingExtraError

MODULE = "mrgrpo.integrations.verl"
ENV = "VERL_USE_EXTERNAL_MODULES"


def with_module(value: str | None, extra: tuple[str, ...] | list[str] = ()) -> str:
    """``VERL_USE_EXTERNAL_MODULES`` with the ``extra`` modules (a user's estimators) and
    :data:`MODULE` added once each (comma-separated list)."""
    modules = [m.strip() for m in (value or "").split(",") if m.strip()]
    modules += [m for m in dict.fromkeys(extra) if m not in modules]
    return ",".join(modules if MODULE in modules else [*modules, MODULE])


def prepare(config: Any) -> Any:
    """Validate the mrgrpo settings of a composed verl config and load the integration in every
    Ray worker (see module doc); returns ``config``, edited in place."""
    from omegaconf import OmegaConf, open_dict

    import mrgrpo
    import mrgrpo.integrations.verl as integration
    from mrgrpo.integrations.verl.binding import bind_settings, check_resumed
    from mrgrpo.integrations.verl.names import mrgrpo_name
    from mrgrpo.integrations.verl.registration import import_user_modules
    from mrgrpo.integrations.verl.config import MrgrpoVerlConfig
    from mrgrpo.integrations.verl.state import STATE_FILE, read_record, resume_folder

    estimator = mrgrpo_name(OmegaConf.select(config, "algorithm.adv_estimator"))
    user_modules: tuple[str, ...] = ()
    if estimator is not None:
        settings = MrgrpoVerlConfig.from_algorithm_config(config.algorithm)
        known = import_user_modules(settings)
        user_modules = settings.imports
        if estimator not in mrgrpo.available_estimators():
            raise ConfigError(
                f"algorithm.adv_estimator=mrgrpo_{estimator} is not an mrgrpo estimator; known: {known} "
                "(your own: register it with @mrgrpo.register_estimator in a module named in algorithm.mrgrpo.import)"
            )
        norm = bool(OmegaConf.select(config, "algorithm.norm_adv_by_std_in_grpo", default=True))
        bind_settings(estimator, settings, norm)  # every estimator setting, checked once, here
        folder = resume_folder(config)  # the state verl will resume with must fit, too
        record = read_record(folder, estimator) if folder is not None else None
        if record is not None and mrgrpo.get_estimator(estimator).stateful:
            check_resumed(config, estimator, record.get("state"), str(Path(folder) / STATE_FILE))
    if OmegaConf.select(config, "trainer.use_v1", default=False) and not integration.install_v1():
        raise MissingExtraError(
            "verl's v1 trainer (trainer.use_v1=true)", "verl", "transferqueue",
            install="pip install 'mrgrpo[verl]' && pip install --no-deps verl==0.9.1 transferqueue",
        )
    os.environ[ENV] = with_module(os.environ.get(ENV), user_modules)
    with open_dict(config):
        env_vars = OmegaConf.select(config, "ray_kwargs.ray_init.runtime_env.env_vars", default=None)
        current = env_vars.get(ENV) if env_vars is not None else None
        OmegaConf.update(
            config, f"ray_kwargs.ray_init.runtime_env.env_vars.{ENV}", with_module(current, user_modules), force_add=True
        )
    return config


def main() -> None:
    """Compose the config as verl does, :func:`prepare` it, run verl's ``main_ppo.main``."""
    import hydra
    import verl.trainer
    from verl.trainer import main_ppo

    config_dir = str(Path(verl.trainer.__file__).parent / "config")

    @hydra.main(config_path=config_dir, config_name="ppo_trainer", version_base=None)
    def run(config):
        with reporting_user_errors():  # one line, exit 2 (not Hydra's "Error executing job" traceback)
            config = prepare(config)
        main_ppo.main(config)  # Hydra hands a composed config straight to verl's task

    run()
