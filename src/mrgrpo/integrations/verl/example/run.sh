#!/usr/bin/env bash
# mrgrpo estimators on verl: single node (N GPUs) or a multi-node Ray cluster.
#
# Single node:   NGPUS=8 bash examples/verl/run.sh
# Multi-node:    on the head node   ray start --head --port=6379
#                on every worker    ray start --address=<head-ip>:6379
#                then on the head   NNODES=2 NGPUS=8 RAY_ADDRESS=auto bash examples/verl/run.sh
# Settings (environment): MODEL, ESTIMATOR (mrgrpo_<name>), DATA_DIR, NNODES, NGPUS, ROLLOUT_N,
# EXPERIMENT; anything else as Hydra overrides after the script's arguments, e.g.
#   bash examples/verl/run.sh algorithm.mrgrpo.normalization=token actor_rollout_ref.actor.optim.lr=2e-6
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${PYTHON:-python3}"
MODEL="${MODEL:-Qwen/Qwen2.5-1.5B-Instruct}"
ESTIMATOR="${ESTIMATOR:-mrgrpo_gdpo}"
DATA_DIR="${DATA_DIR:-$HOME/data/mrgrpo_math}"
NNODES="${NNODES:-1}"
NGPUS="${NGPUS:-$(nvidia-smi -L 2>/dev/null | wc -l)}"
ROLLOUT_N="${ROLLOUT_N:-8}"
EXPERIMENT="${EXPERIMENT:-math_${ESTIMATOR}}"

if [ ! -f "$DATA_DIR/train.parquet" ]; then
  "$PYTHON" "$HERE/prepare_data.py" --out "$DATA_DIR"
fi

REWARD_PATH="$("$PYTHON" -c 'import mrgrpo.integrations.verl_reward as m; print(m.__file__)')"

# verl's main_ppo with the integration loaded in every Ray process; it checks the estimator and
# its algorithm.mrgrpo settings before Ray starts.
exec "$PYTHON" -m mrgrpo.integrations.verl \
  --config-path "$HERE" --config-name mrgrpo_math \
  data.train_files="$DATA_DIR/train.parquet" \
  data.val_files="$DATA_DIR/test.parquet" \
  actor_rollout_ref.model.path="$MODEL" \
  actor_rollout_ref.rollout.n="$ROLLOUT_N" \
  algorithm.adv_estimator="$ESTIMATOR" \
  reward.custom_reward_function.path="$REWARD_PATH" \
  trainer.nnodes="$NNODES" \
  trainer.n_gpus_per_node="$NGPUS" \
  trainer.experiment_name="$EXPERIMENT" \
  "$@"
