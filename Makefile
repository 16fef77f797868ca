# One entry point for learners, instructors and CI.  `make help` lists the targets.
# Everything runs inside ./.venv, created on first use; later calls are quick no-ops.

PYTHON      ?= $(shell command -v python3.11 || command -v python3)
VENV        ?= .venv
PY          := $(VENV)/bin/python
# torch is pinned here, not in pyproject.toml: on this project's machines the pinned
# version is a CPU wheel on local disk, while an unpinned `torch` pulls a multi-GB CUDA build.
# A learner with a GPU can run e.g. `make setup TORCH_SPEC="torch==2.13.0 --index-url ..."`.
TORCH_SPEC  ?= torch==2.13.0
MEGATRON    ?= megatron-core==0.16.1
PYTEST_ARGS ?=
LAB_ARGS    ?= $(if $(filter 0,$(shell id -u 2>/dev/null)),--allow-root)
export PYTHONHASHSEED := 0
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: help setup setup-crosscheck lab test test-gpu run-all outputs exercises data bench nbcheck clean

help:
	@echo "make lab        set up (first time only) and open JupyterLab on the workbook"
	@echo "make test       set up, then run the whole test suite (unit, notebooks, exercises, megatron-core cross-checks)"
	@echo "make run-all    execute every chapter headless with papermill into runs/ and print a table"
	@echo "make test-gpu   the same test suite on a CUDA machine; fails if no GPU is visible"
	@echo "make outputs    re-execute the committed notebooks and solutions in place (default parameters)"
	@echo "make exercises  regenerate exercises/ from solutions/"
	@echo "make bench      run benchmarks/ and write benchmarks/results/*.json"
	@echo "make data       rebuild data/ from offline sources (Debian packages, the Python stdlib)"

$(VENV)/.stamp-base: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e .
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (workbook)" >/dev/null
	touch $@

$(VENV)/.stamp-crosscheck: $(VENV)/.stamp-base
	$(PY) -m pip install -q -e ".[crosscheck]"
	$(PY) -m pip install -q --no-deps "$(MEGATRON)"
	touch $@

setup: $(VENV)/.stamp-base
setup-crosscheck: $(VENV)/.stamp-crosscheck

lab: setup
	$(VENV)/bin/jupyter lab --notebook-dir=. $(LAB_ARGS) notebooks/00_orientation.ipynb

test: setup-crosscheck
	LABSUPPORT_REQUIRE_CROSSCHECK=1 $(PY) -m pytest $(PYTEST_ARGS)

test-gpu: setup-crosscheck
	LABSUPPORT_REQUIRE_CROSSCHECK=1 LABSUPPORT_REQUIRE_GPU=1 $(PY) -m pytest $(PYTEST_ARGS)

run-all: setup
	$(PY) -m labsupport.runall --out runs

outputs: setup-crosscheck
	$(PY) -m labsupport.runall --in-place notebooks solutions

exercises: setup
	$(PY) -m labsupport.make_exercises

data: setup
	$(PY) scripts/build_data.py

bench: setup-crosscheck
	$(PY) -m benchmarks

nbcheck:
	python3 ../shared/tools/nbcheck.py .

clean:
	rm -rf runs .pytest_cache
