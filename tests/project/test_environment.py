"""The two dependency lists (pyproject.toml for pip/make, environment.yml for conda) agree."""
from __future__ import annotations

import re
import tomllib

import yaml

from labsupport.paths import REPO_ROOT

EIGHT = {"jupyterlab", "ipywidgets", "matplotlib", "torch", "sentencepiece", "numpy", "nbval", "papermill"}


def _name(spec: str) -> str:
    return re.split(r"[<>=!~\[ ;]", spec, maxsplit=1)[0].strip().lower()


def _pyproject_deps() -> dict[str, str]:
    data = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {_name(s): s.replace(" ", "") for s in data["project"]["dependencies"]}


def _conda_env() -> tuple[list[str], dict[str, str]]:
    env = yaml.safe_load((REPO_ROOT / "environment.yml").read_text(encoding="utf-8"))
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    pip_lists = [d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d]
    assert len(pip_lists) == 1, "environment.yml needs exactly one pip: section"
    pip = {_name(s): s.replace(" ", "") for s in pip_lists[0] if not s.startswith("-e")}
    assert "-e ." in pip_lists[0], "environment.yml must install the workbook itself (-e .)"
    return conda, pip


def test_environment_yml_matches_pyproject():
    conda, pip = _conda_env()
    assert pip == _pyproject_deps()


def test_environment_pins_python_311():
    conda, _ = _conda_env()
    assert "python=3.11" in conda


def test_the_eight_packages_are_declared():
    assert EIGHT <= set(_pyproject_deps())


def test_makefile_pins_the_cpu_torch_inside_the_declared_range():
    makefile = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    pinned = re.search(r"^TORCH_SPEC\s*\?=\s*torch==([\d.]+)", makefile, re.M)
    assert pinned, "Makefile must pin torch (TORCH_SPEC) so pip takes the CPU wheel"
    from packaging.specifiers import SpecifierSet

    spec = SpecifierSet(_pyproject_deps()["torch"][len("torch"):])
    assert pinned.group(1) in spec


def test_ci_runs_the_readme_test_command():
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    ci = (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "make test" in readme
    # the default Python, then Python 3.12 where one exists; only pytest's --durations report added
    assert re.search(r'^\s*make test PYTEST_ARGS="--durations=15\$\{PYTEST_ARGS:\+ \$PYTEST_ARGS\}" "\$@"', ci, re.M)
    assert re.search(r'^\s*suite "default Python"', ci, re.M) and 'suite "Python 3.12" PYTHON="$py312"' in ci
