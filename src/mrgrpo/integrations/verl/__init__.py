"""mrgrpo estimators inside an unmodified verl (Ray, FSDP/Megatron, vLLM/SGLang, multi-node).

Importing this module:

1. registers every mrgrpo estimator in verl's advantage-estimator registry as ``mrgrpo_<name>``
   (``algorithm.adv_estimator=mrgrpo_corr_grpo``); :func:`register_all` adds estimators
   registered later; re-importing is idempotent;
2. legacy trainer (``trainer.use_v1=false``): wraps ``verl.trainer.ppo.ray_trainer.compute_advantage``
   once (:mod:`.patch`) so our estimators receive ``non_tensor_batch``, i.e. the per-component
   scores that the reward function returned (keys named in ``algorithm.mrgrpo.components``,
   see :mod:`.config`);
3. v1 trainer (``trainer.use_v1=true``, verl's default; needs ``transferqueue``): replaces each
   trainer of verl's v1 registry by a subclass that hands our estimators the components from
   the TransferQueue and groups multi-turn sessions by their final output (:mod:`.v1`).

It must be imported in the process that runs the trainer (a Ray actor): launch with
``python -m mrgrpo.integrations.verl <verl overrides>`` (verl's ``main_ppo`` with the
integration loaded everywhere), or set ``VERL_USE_EXTERNAL_MODULES=mrgrpo.integrations.verl`` in
the Ray runtime_env yourself (verl imports the listed modules whenever ``verl`` is imported).

Conventions (``mrgrpo_grpo`` equals verl's ``grpo``; ``mrgrpo_gdpo`` with
``algorithm.mrgrpo.normalization=token`` equals verl's ``gdpo``): eps defaults to verl's 1e-6,
stds are unbiased, ``norm_adv_by_std_in_grpo=false`` maps to GRPO's ``scale="none"``. mrgrpo's
default final normalization (gdpo, sa_mrpo) is per rollout, as in TRL; ``normalization=token``
uses verl's ``masked_whiten`` over response tokens instead. One deliberate difference: verl gives a
group of a single rollout its raw score as advantage, mrgrpo gives 0 (``singleton_groups: score``
restores verl's value).
"""

from __future__ import annotations

import sys

from mrgrpo.command_errors import reporting_user_errors
from mrgrpo.integrations.verl.adapter import token_advantages
from mrgrpo.integrations.verl.config import MrgrpoVerlConfig
from mrgrpo.integrations.verl.names import PREFIX, mrgrpo_name, verl_name
from mrgrpo.integrations.verl.patch import install, uninstall
from mrgrpo.integrations.verl.registration import import_user_modules, register_all


def install_v1() -> bool:
    """Wrap verl's v1 trainers (:mod:`.v1`); ``False`` where verl's v1 trainer cannot be imported
    (e.g. ``transferqueue`` missing: then verl's v1 trainer cannot run in this process either)."""
    try:
        from mrgrpo.integrations.verl import v1
    except ImportError:
        return False
    v1.install()
    return True


def _imported_by_the_launcher() -> bool:
    """``python -m mrgrpo.integrations.verl``: Python imports this package before ``__main__`` runs,
    so a missing extra here must already be the launcher's one line (exit 2), not a traceback."""
    argv = list(getattr(sys, "orig_argv", ()))
    return "-m" in argv[:-1] and argv[argv.index("-m") + 1] == __name__


if _imported_by_the_launcher():
    with reporting_user_errors():
        register_all()
else:
    register_all()
install()
install_v1()

__all__ = [
    "PREFIX",
    "MrgrpoVerlConfig",
    "import_user_modules",
    "install",
    "install_v1",
    "mrgrpo_name",
    "register_all",
    "token_advantages",
    "uninstall",
    "verl_name",
]
