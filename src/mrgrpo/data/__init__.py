"""Task loaders: prompts in conversational format plus the columns reward suites read.

* :mod:`mrgrpo.data.reasoning_tasks`: ``load_reasoning_gym`` (reasoning-gym, seeded disjoint split)
* :mod:`mrgrpo.data.qa`: ``load_qa`` (question/answer JSONL, parquet, CSV or hub datasets, GSM8K-style)
* :mod:`mrgrpo.data.bfcl`: ``load_bfcl`` (BFCL function calling, from the ``bfcl-eval`` data)

Modules are imported on demand (``datasets`` is heavy).
"""
