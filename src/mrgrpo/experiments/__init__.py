"""Experiments: ``mrgrpo compare`` (estimators × seeds, paired, with intervals), ``mrgrpo analyze``
(replay logged reward batches through every estimator) and the controlled testbed."""
