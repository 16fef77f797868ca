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
# GPU runners and offline machines (README "GPU runner"):
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

.PHONY: help setup setup-crosscheck lab test test-gpu gpu-report wheels run-all outputs exercises data bench nbcheck clean

help:
	@echo "make lab        set up (first time only) and open JupyterLab on the workbook"
	@echo "make test       set up, then run the whole test suite (unit, notebooks, exercises, megatron-core cross-checks)"
	@echo "make run-all    execute every chapter headless with papermill into runs/ and print a table"
	@echo "make test-gpu   the same test suite on a CUDA machine; fails if no GPU is visible"
	@echo "make gpu-report on a CUDA machine: make test-gpu, then the GPU measurements → benchmarks/results/gpu.json"
	@echo "make wheels WHEELS=DIR  download every wheel an offline GPU runner needs (PY_VERSION=3.12 for its Python)"
	@echo "options: SYSTEM_TORCH=1 (reuse the system's torch), WHEELS=DIR (install from a wheel folder, no network)"
	@echo "make outputs    re-execute the committed notebooks and solutions in place (default parameters)"
	@echo "make exercises  regenerate exercises/ from solutions/"
	@echo "make bench      run benchmarks/ and write benchmarks/results/*.json"
	@echo "make data       rebuild data/ from offline sources (Debian packages, the Python stdlib)"

$(VENV)/.stamp-base: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(if $(SYSTEM_TORCH),--system-site-packages) $(VENV)
	$(if $(WHEELS),,$(PY) -m pip install -q --upgrade pip)
	$(if $(SYSTEM_TORCH),$(PY) -c "import torch; print('using the system torch', torch.__version__, '· CUDA', torch.version.cuda)",$(PY) -m pip install -q $(PIP_SOURCE) $(TORCH_SPEC))
	$(PY) -m pip install -q $(PIP_SOURCE) -e .
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (workbook)" >/dev/null
	touch $@

$(VENV)/.stamp-crosscheck: $(VENV)/.stamp-base
	$(PY) -m pip install -q $(PIP_SOURCE) -e ".[crosscheck]"
	$(PY) -m pip install -q $(PIP_SOURCE) --no-deps "$(MEGATRON)"
	touch $@

setup: $(VENV)/.stamp-base
setup-crosscheck: $(VENV)/.stamp-crosscheck

lab: setup
	$(VENV)/bin/jupyter lab --notebook-dir=. $(LAB_ARGS) notebooks/00_orientation.ipynb

test: setup-crosscheck
	LABSUPPORT_REQUIRE_CROSSCHECK=1 $(PY) -m pytest $(PYTEST_ARGS)

test-gpu: setup-crosscheck
	LABSUPPORT_REQUIRE_CROSSCHECK=1 LABSUPPORT_REQUIRE_GPU=1 $(PY) -m pytest $(PYTEST_ARGS)

gpu-report: setup-crosscheck
	mkdir -p runs
	-LABSUPPORT_REQUIRE_CROSSCHECK=1 LABSUPPORT_REQUIRE_GPU=1 $(PY) -m pytest $(PYTEST_ARGS) --junitxml=runs/test-gpu.xml
	$(PY) -m benchmarks.gpu_report --junit runs/test-gpu.xml

# Wheels for an offline runner: everything but torch (SYSTEM_TORCH=1 keeps the system's).
PY_VERSION ?= $(shell $(PYTHON) -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
wheels:
	test -n "$(WHEELS)" || { echo "make wheels: say where, e.g. make wheels WHEELS=wheelhouse"; exit 2; }
	$(PYTHON) -m pip download -q -d $(WHEELS) --only-binary=:all: --python-version $(PY_VERSION) \
	    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
	    --platform any "setuptools>=77" pip wheel \
	    $$($(PYTHON) -c 'import tomllib; d=tomllib.load(open("pyproject.toml","rb"))["project"]; print(" ".join(r for r in d["dependencies"] + d["optional-dependencies"]["crosscheck"] if not r.startswith("torch")))')
	$(PYTHON) -m pip download -q -d $(WHEELS) --no-deps "$(MEGATRON)"

run-all: setup
	$(PY) -m labsupport.runall --out runs $(RUNALL_ARGS)

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
