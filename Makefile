# Two commands on a fresh machine: `make demo` (the main job) and `make test`.
# Both depend on `make setup`, which is idempotent and takes seconds once done.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.ddrive-setup-stamp

.PHONY: setup test test-all demo bench clean help

help:
	@echo "make setup   - create $(VENV) with every dependency and install ddrive_ros editable"
	@echo "make test    - run the test suite (under ~15 minutes on 2 cores)"
	@echo "make demo    - synthetic bag -> planner node -> replay -> metrics and pictures"
	@echo "make bench   - decoding and runtime benchmarks (tables + JSON under bench/results)"

setup: $(STAMP)

# The stamp depends on the files that define the environment, so a change re-runs pip.
$(STAMP): requirements.txt setup.py setup.cfg package.xml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation --config-settings editable_mode=compat -e .
	# Debian's colcon for the install test (test/test_colcon_install.py); skipped when present or not root
	if ! command -v colcon >/dev/null && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q colcon python3-colcon-ros python3-colcon-python-setup-py; fi
	touch $(STAMP)

test: setup
	$(BIN)/python -m pytest -q test

test-all: setup
	$(BIN)/python -m pytest -q -m "" test

demo: setup
	$(BIN)/ddrive demo --out demo_out

bench: setup
	$(BIN)/ddrive bench decoding --plans 5 --json bench/results/decoding_cpu.json
	$(BIN)/ddrive bench runtime --plans 3 --json bench/results/runtime_cpu.json

clean:
	rm -rf $(VENV) build *.egg-info demo_out
