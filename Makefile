# One entry point for learners, instructors and CI.  `make help` lists the targets.
# Everything runs inside ./.venv (./.venv-X.Y for another PYTHON), created on first use; later
# calls are quick no-ops.

# Python: python3.11 where it exists, else python3; another with e.g. `make test PYTHON=python3.12`.
DEFAULT_PYTHON := $(shell command -v python3.11 || command -v python3)
PYTHON      ?= $(DEFAULT_PYTHON)
py_version   = $(shell $(1) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
# The interpreter's X.Y; `make wheels` takes the offline runner's instead (PY_VERSION=3.12).
PY_VERSION  ?= $(call py_version,$(PYTHON))
PY_VERSION  := $(PY_VERSION)
DEFAULT_VERSION := $(if $(filter $(DEFAULT_PYTHON),$(PYTHON)),$(PY_VERSION),$(call py_version,$(DEFAULT_PYTHON)))
# One virtualenv per Python version: .venv for the default interpreter's version, .venv-X.Y for
# another (`make test PYTHON=python3.12` builds .venv-3.12 and leaves .venv as it is).
VENV        ?= $(if $(filter $(DEFAULT_VERSION),$(PY_VERSION)),.venv,.venv-$(PY_VERSION))
PY          := $(VENV)/bin/python
# torch is pinned here, not in pyproject.toml: on this project's machines the pinned
# version is a CPU wheel on local disk, while an unpinned `torch` pulls a multi-GB CUDA build.
# On Python 3.12, PyPI's torch 2.13.0 for Linux is that CUDA build (~3 GB; it runs on the CPU).
# A learner with a GPU can run e.g. `make setup TORCH_SPEC="torch==2.13.0 --index-url ..."`.
TORCH_SPEC  ?= torch==2.13.0
# The megatron-core the cross-checks run against: 0.16.1 is the newest release that installs on
# Python 3.10/3.11; 0.17+ need Python 3.12. Both are proven by `.ci/run` (docs/versions.md).
MEGATRON    ?= megatron-core==$(if $(filter 3.10 3.11,$(PY_VERSION)),0.16.1,0.19.2)
MEGATRON    := $(MEGATRON)
PYTEST_ARGS ?=
# GPU runners and offline machines (docs/versions.md, "GPU runner"):
#   SYSTEM_TORCH=1   build .venv on top of the system's Python packages (--system-site-packages) and
#                    keep the torch already installed there (e.g. a CUDA build in a container image)
#   WHEELS=DIR       install every package from the wheel folder DIR, never from the network
#                    (`make wheels WHEELS=DIR` fills it on a machine that has a network)
SYSTEM_TORCH ?=
WHEELS      ?=
PIP_SOURCE  := $(if $(WHEELS),--no-index --find-links $(abspath $(WHEELS)))
RUNALL_ARGS ?=
LAB_ARGS    ?= $(if $(filter 0,$(shell id -u 2>/dev/null)),--allow-root)
export PYTHONHASHSEED := 0
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: help versions check-python setup setup-crosscheck lab lab-ko translations lint test test-fast test-gpu gpu-report wheels run-all outputs exercises data bench nbcheck browser-check clean

help:
	@echo "make lab        set up (first time only) and open JupyterLab on the workbook"
	@echo "make lab-ko     the same on the Korean edition (한국어판, ko/), with the checks' feedback in Korean"
	@echo "make test       set up, then run the whole test suite (unit, notebooks, exercises, megatron-core cross-checks)"
	@echo "                PYTHON=python3.12: the same on Python 3.12 with megatron-core 0.19.2, in .venv-3.12"
	@echo "make lint       ruff over the repository (the rules in pyproject.toml)"
	@echo "make test-fast  the contributor's loop: tests/ only, no notebook executed, no process started (-m 'not slow')"
	@echo "make run-all    execute every chapter headless with papermill into runs/ and print a table"
	@echo "make test-gpu   the same test suite on a CUDA machine; fails if no GPU is visible"
	@echo "make gpu-report on a CUDA machine: make test-gpu, then the GPU measurements → benchmarks/results/gpu.json"
	@echo "make wheels WHEELS=DIR  download every wheel an offline GPU runner needs (PY_VERSION=3.12 for its Python)"
	@echo "make versions   the Python, virtualenv, megatron-core and torch a make test here would use"
	@echo "options: SYSTEM_TORCH=1 (reuse the system's torch), WHEELS=DIR (install from a wheel folder, no network)"
	@echo "make outputs    re-execute the committed notebooks and solutions in place (default parameters)"
	@echo "make exercises  regenerate exercises/ from solutions/"
	@echo "make translations  update translations/ko/*.po from the English notebooks and regenerate ko/"
	@echo "make bench      run benchmarks/ and write benchmarks/results/*.json"
	@echo "make browser-check  the chapter pages in headless Chromium at a 960 px output width: no hidden table column,"
	@echo "                no word cut in two → benchmarks/results/browser_check.json (CHROMIUM=path, BROWSER_ARGS=...)"
	@echo "make data       rebuild data/ from offline sources (Debian packages, the Python stdlib)"

# Refuses a PYTHON that does not run, and a $(VENV) that another Python version built.
check-python:
	@test -n "$(PY_VERSION)" || { echo "error: PYTHON=$(PYTHON) does not run: install that Python or name one that runs, e.g. make test PYTHON=/usr/bin/python3.12" >&2; exit 1; }
	@test ! -x $(PY) || $(PY) -c 'import sys; sys.exit("%d.%d" % sys.version_info[:2] != "$(PY_VERSION)")' || { echo "error: $(VENV) is a virtualenv of another Python version than PYTHON=$(PYTHON) ($(PY_VERSION)): remove it (rm -rf $(VENV)) or pass VENV=DIR" >&2; exit 1; }

$(VENV)/.stamp-base: pyproject.toml | check-python
	test -x $(PY) || $(PYTHON) -m venv $(if $(SYSTEM_TORCH),--system-site-packages) $(VENV)
	$(if $(WHEELS),,$(PY) -m pip install -q --upgrade pip)
	$(if $(SYSTEM_TORCH),$(PY) -c "import torch; print('using the system torch', torch.__version__, '· CUDA', torch.version.cuda)",$(PY) -m pip install -q $(PIP_SOURCE) $(TORCH_SPEC))
	$(PY) -m pip install -q $(PIP_SOURCE) -e .
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (workbook)" >/dev/null
	touch $@

# The stamp holds the megatron-core spec it installed; another MEGATRON=... installs that one.
$(VENV)/.stamp-crosscheck: $(VENV)/.stamp-base
	$(PY) -m pip install -q $(PIP_SOURCE) -e ".[crosscheck]"
	$(PY) -m pip install -q $(PIP_SOURCE) --no-deps "$(MEGATRON)"
	echo "$(MEGATRON)" > $@

# A learner's set-up includes megatron-core, so the chapters' comparisons with it run as they did
# for the committed outputs; where it cannot be installed the workbook runs without it, and says so.
setup: $(VENV)/.stamp-base
	@test -f $(VENV)/.stamp-crosscheck || $(MAKE) --no-print-directory setup-crosscheck || echo "make setup: megatron-core ($(MEGATRON)) could not be installed here; the workbook runs without it, and the cells that compare with it say so (retry: make setup-crosscheck)" >&2
setup-crosscheck: $(VENV)/.stamp-crosscheck
	@test "$$(cat $<)" = "$(MEGATRON)" || { $(PY) -m pip install -q $(PIP_SOURCE) --no-deps "$(MEGATRON)" && echo "$(MEGATRON)" > $<; }

versions:
	@echo "PYTHON=$(PYTHON) (Python $(PY_VERSION)) VENV=$(VENV) MEGATRON=$(MEGATRON) TORCH_SPEC=$(TORCH_SPEC)"

lab: setup
	$(VENV)/bin/jupyter lab --notebook-dir=. $(LAB_ARGS) notebooks/00_orientation.ipynb

# 한국어판: the generated Korean notebooks; LABSUPPORT_LANG=ko gives the checks' feedback texts in Korean
lab-ko: setup
	LABSUPPORT_LANG=ko $(VENV)/bin/jupyter lab --notebook-dir=. $(LAB_ARGS) ko/notebooks/00_orientation.ipynb

# ruff, pinned so that every machine reads the rules the same way
$(VENV)/.stamp-lint: $(VENV)/.stamp-base
	$(PY) -m pip install -q $(PIP_SOURCE) -e ".[lint]"
	touch $@

lint: $(VENV)/.stamp-lint
	$(VENV)/bin/ruff check .

test: setup-crosscheck
	LABSUPPORT_REQUIRE_CROSSCHECK=1 $(PY) -m pytest $(PYTEST_ARGS)

# A few minutes: no nbval (the notebooks are not collected) and no test marked slow (those that execute
# a notebook or start a process; tests/conftest.py lists them and refuses an unmarked one that does).
# make test stays the complete suite.
test-fast: setup-crosscheck
	LABSUPPORT_REQUIRE_CROSSCHECK=1 $(PY) -m pytest -p no:nbval -o addopts="-p no:cacheprovider" -m "not slow" tests $(PYTEST_ARGS)

test-gpu: setup-crosscheck
	LABSUPPORT_REQUIRE_CROSSCHECK=1 LABSUPPORT_REQUIRE_GPU=1 $(PY) -m pytest $(PYTEST_ARGS)

gpu-report: setup-crosscheck
	mkdir -p runs
	-LABSUPPORT_REQUIRE_CROSSCHECK=1 LABSUPPORT_REQUIRE_GPU=1 $(PY) -m pytest $(PYTEST_ARGS) --junitxml=runs/test-gpu.xml
	$(PY) -m benchmarks.gpu_report --junit runs/test-gpu.xml

# Wheels for an offline runner: everything but torch (SYSTEM_TORCH=1 keeps the system's);
# megatron-core follows PY_VERSION (0.19.2 for PY_VERSION=3.12).
wheels:
	test -n "$(WHEELS)" || { echo "make wheels: say where, e.g. make wheels WHEELS=wheelhouse"; exit 2; }
	$(PYTHON) -m pip download -q -d $(WHEELS) --only-binary=:all: --python-version $(PY_VERSION) \
	    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
	    --platform any "setuptools>=77" pip wheel \
	    $$($(PYTHON) -c 'import tomllib; d=tomllib.load(open("pyproject.toml","rb"))["project"]; print(" ".join(r for r in d["dependencies"] + d["optional-dependencies"]["crosscheck"] if not r.startswith("torch")))')
	$(PYTHON) -m pip download -q -d $(WHEELS) --no-deps "$(MEGATRON)"

run-all: setup
	$(PY) -m labsupport runall --out runs $(RUNALL_ARGS)

outputs: setup-crosscheck
	$(PY) -m labsupport runall --in-place notebooks solutions

exercises: setup
	$(PY) -m labsupport make-exercises

translations: setup
	$(PY) -m labsupport translations

data: setup
	$(PY) scripts/build_data.py

bench: setup-crosscheck
	$(PY) -m benchmarks

nbcheck: setup
	$(PY) -m labsupport.workbook.nbcheck

# The committed outputs as JupyterLab's CSS lays them out, measured in a real browser (scripts/browser_check.py).
BROWSER_ARGS ?=
browser-check: setup
	$(PY) scripts/browser_check.py $(BROWSER_ARGS)

clean:
	rm -rf runs .pytest_cache
