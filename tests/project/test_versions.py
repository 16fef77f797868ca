"""The two proven version pairs (docs/versions.md): the Makefile picks megatron-core 0.16.1 on
Python 3.10/3.11 and 0.19.2 on 3.12+, one virtualenv per Python version, and ``.ci/run`` runs the
suite on the default Python and then on a Python 3.12 it finds (or says that it skips it)."""
from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from labsupport.paths import REPO_ROOT

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")

HERE = f"{sys.version_info[0]}.{sys.version_info[1]}"
# what an outer `make test PYTHON=...` passes down (environment and MAKEFLAGS) must not leak in
# PYTEST_ARGS: make test exports what .ci/run passes it (--durations=15), and .ci/run adds its own
_MAKE_VARS = ("PYTHON", "PY_VERSION", "VENV", "MEGATRON", "TORCH_SPEC", "PYTEST_ARGS", "MAKEFLAGS", "MFLAGS",
              "MAKELEVEL")


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _MAKE_VARS}
    env.update(extra)
    return env


def _make(*args: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(["make", "-s", "-C", str(REPO_ROOT), *args], capture_output=True, text=True,
                          env=_clean_env() if env is None else env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _installed_megatron(*args: str) -> str:
    """The megatron-core spec `make setup-crosscheck` would install (dry run: nothing runs)."""
    out = _make("-n", "setup-crosscheck", *args)
    specs = set(re.findall(r'--no-deps "(megatron-core==[^"]+)"', out))
    assert len(specs) == 1, out
    return specs.pop()


def _expected(version: str) -> str:
    return "megatron-core==0.16.1" if version in ("3.10", "3.11") else "megatron-core==0.19.2"


@pytest.mark.parametrize("py_version, spec", [("3.10", "megatron-core==0.16.1"), ("3.11", "megatron-core==0.16.1"),
                                              ("3.12", "megatron-core==0.19.2"), ("3.13", "megatron-core==0.19.2")])
def test_make_wheels_picks_megatron_by_the_runners_python(tmp_path, py_version, spec):
    out = _make("-n", "wheels", f"WHEELS={tmp_path}", f"PY_VERSION={py_version}")
    assert f'--no-deps "{spec}"' in out
    assert f"--python-version {py_version}" in out


def test_make_picks_megatron_for_this_interpreter(tmp_path):
    venv = tmp_path / "v"
    assert _installed_megatron(f"PYTHON={sys.executable}", f"VENV={venv}") == _expected(HERE)
    assert not venv.exists()  # a dry run


def test_make_picks_megatron_for_every_python_on_this_machine(tmp_path):
    """Each interpreter that exists here (3.11 on PATH, the 3.12 that .ci/run finds) gets its pair."""
    found = {HERE: sys.executable}
    if shutil.which("python3.11"):
        found.setdefault("3.11", shutil.which("python3.11"))
    proc = subprocess.run(["bash", str(REPO_ROOT / ".ci" / "run"), "--find-python312"], capture_output=True,
                          text=True, env=_clean_env(), timeout=120)
    if proc.returncode == 0:
        found["3.12"] = proc.stdout.strip()
    for version, exe in found.items():
        ran = subprocess.run([exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=60)
        if ran.returncode != 0:   # e.g. a pyenv shim for a version that is not installed
            continue
        assert _installed_megatron(f"PYTHON={exe}", f"VENV={tmp_path / version}") == _expected(ran.stdout.strip())


def test_megatron_can_be_overridden(tmp_path):
    assert _installed_megatron(f"PYTHON={sys.executable}", f"VENV={tmp_path}/v",
                               "MEGATRON=megatron-core==0.17.0") == "megatron-core==0.17.0"


def test_one_virtualenv_per_python_version(tmp_path):
    """.venv belongs to the default interpreter's version; another version gets .venv-X.Y."""
    default = _make("versions")
    m = re.search(r"\(Python (\d+\.\d+)\) VENV=(\S+)", default)
    assert m and m.group(2) == ".venv", default
    other = "3.12" if m.group(1) != "3.12" else "3.11"
    fake = tmp_path / f"python{other}"   # an interpreter that reports another version
    fake.write_text(f"#!/bin/sh\necho {other}\n")
    fake.chmod(0o755)
    assert f"VENV=.venv-{other} " in _make("versions", f"PYTHON={fake}")
    mine = ".venv" if HERE == m.group(1) else f".venv-{HERE}"
    assert f"VENV={mine} " in _make("versions", f"PYTHON={sys.executable}")


def test_a_python_that_does_not_run_is_refused(tmp_path):
    proc = subprocess.run(["make", "-C", str(REPO_ROOT), "setup", f"PYTHON={tmp_path / 'python3.12'}"],
                          capture_output=True, text=True, env=_clean_env(), timeout=120)
    assert proc.returncode != 0
    assert f"error: PYTHON={tmp_path / 'python3.12'} does not run" in proc.stderr
    assert not (REPO_ROOT / ".venv-").exists()


def test_a_virtualenv_of_another_python_is_refused(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    other = "3.12" if HERE != "3.12" else "3.11"
    (venv / "bin" / "python").write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import sys; sys.exit(1)'\n")
    (venv / "bin" / "python").chmod(0o755)
    proc = subprocess.run(["make", "-C", str(REPO_ROOT), "setup", f"PYTHON={sys.executable}", f"VENV={venv}"],
                          capture_output=True, text=True, env=_clean_env(), timeout=120)
    assert proc.returncode != 0, other
    assert f"error: {venv} is a virtualenv of another Python version" in proc.stderr
    assert sorted(p.name for p in venv.iterdir()) == ["bin"]  # nothing was installed into it


def test_the_installed_megatron_is_the_makefiles_choice():
    """Under `make test` the cross-checks ran against the megatron-core this Python is proven with."""
    if os.environ.get("LABSUPPORT_REQUIRE_CROSSCHECK") != "1":
        pytest.skip("only under make test (LABSUPPORT_REQUIRE_CROSSCHECK=1)")
    want = os.environ.get("MEGATRON") or _expected(HERE)   # `make test MEGATRON=...` exports it
    assert f"megatron-core=={importlib.metadata.version('megatron-core')}" == want


# -- .ci/run ------------------------------------------------------------------------------------
TEST = "test PYTEST_ARGS=--durations=15"   # how .ci/run calls make test


def _ci(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """.ci/run with a stand-in `make` on PATH that records its arguments (nothing is installed)."""
    bin_dir, log = tmp_path / "bin", tmp_path / "make.log"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "make").write_text('#!/bin/sh\necho "$*" >> "$FAKE_MAKE_LOG"\n'
                                  '[ "$2" = versions ] && echo "versions $3"\nexit ${FAKE_MAKE_RC:-0}\n')
    (bin_dir / "make").chmod(0o755)
    full = _clean_env(FAKE_MAKE_LOG=str(log), **env)
    full["PATH"] = f"{bin_dir}:{env.get('PATH', os.environ['PATH'])}"
    proc = subprocess.run(["bash", str(REPO_ROOT / ".ci" / "run")], capture_output=True, text=True, env=full,
                          timeout=300)
    return proc, log.read_text().splitlines() if log.exists() else []


def test_ci_runs_the_default_suite_then_python_312(tmp_path):
    py312 = tmp_path / "py312" / "python3.12"   # any interpreter that reports 3.12 and has venv
    py312.parent.mkdir()
    py312.write_text("#!/bin/sh\necho /opt/python3.12/bin/python3.12\n")
    py312.chmod(0o755)
    proc, calls = _ci(tmp_path, PYTHON312=str(py312))
    assert proc.returncode == 0, proc.stderr
    py = "PYTHON=/opt/python3.12/bin/python3.12"
    assert "== .ci/run: lint passed" in proc.stdout
    # make test with pytest's list of the slowest 15 tests (where the suite's time goes)
    assert calls == ["lint", "-s versions", "setup-crosscheck", TEST, f"-s versions {py}", f"setup-crosscheck {py}",
                     f"{TEST} {py}"]
    assert "== .ci/run: default Python: passed (set up" in proc.stdout
    assert "== .ci/run: Python 3.12: passed (set up" in proc.stdout


def test_ci_runs_both_suites_and_fails_when_one_fails(tmp_path):
    py312 = tmp_path / "python3.12"
    py312.write_text("#!/bin/sh\necho /opt/python3.12/bin/python3.12\n")
    py312.chmod(0o755)
    proc, calls = _ci(tmp_path, PYTHON312=str(py312), FAKE_MAKE_RC="2")
    assert proc.returncode == 1
    assert "setup-crosscheck" in calls and "setup-crosscheck PYTHON=/opt/python3.12/bin/python3.12" in calls
    assert "== .ci/run: default Python: FAILED to set up" in proc.stdout


def test_ci_says_when_it_skips_python_312(tmp_path):
    """No python3.12 on PATH and no pyenv: the 3.12 suite is skipped, and the output says so."""
    bare = tmp_path / "bare"
    bare.mkdir()
    for tool in ("sh", "bash", "cat", "grep", "sort", "ls", "dirname", "env"):
        if shutil.which(tool):
            (bare / tool).symlink_to(shutil.which(tool))
    proc, calls = _ci(tmp_path, PATH=str(bare), PYENV_ROOT=str(tmp_path / "no-pyenv"), HOME=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert calls == ["lint", "-s versions", "setup-crosscheck", TEST]
    assert "SKIPPED the Python 3.12 suite: no working Python 3.12 here" in proc.stdout


def test_ci_refuses_a_named_interpreter_that_is_not_312(tmp_path):
    proc, calls = _ci(tmp_path, PYTHON312=sys.executable if HERE != "3.12" else "/nonexistent/python")
    assert proc.returncode == 1
    assert "is not a working Python 3.12" in proc.stderr
    assert calls == ["lint", "-s versions", "setup-crosscheck", TEST]


# -- the documents say what the Makefile does -----------------------------------------------------
def test_versions_manual_table_is_the_makefiles_choice(tmp_path):
    manual = (REPO_ROOT / "docs" / "versions.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (3\.\d+) \| (\d+\.\d+\.\d+)\b.*\| `(\.venv[^`]*)` \| `(make test[^`]*)` \|$", manual, re.M)
    assert [r[0] for r in rows] == ["3.11", "3.12"], rows
    for version, megatron, venv, command in rows:
        assert f"megatron-core=={megatron}" == _expected(version)
        plan = _make("-n", "wheels", f"WHEELS={tmp_path}", f"PY_VERSION={version}")
        assert plan.count(f'"megatron-core=={megatron}"') == 1
        assert venv == (".venv" if version == "3.11" else f".venv-{version}")
        assert command == ("make test" if version == "3.11" else f"make test PYTHON=python{version}")


def test_the_cpu_workflow_runs_both_proven_pythons():
    import yaml

    flow = yaml.safe_load((REPO_ROOT / ".github" / "workflows" / "cpu.yml").read_text(encoding="utf-8"))
    job = flow["jobs"]["test"]
    assert job["strategy"]["matrix"]["python"] == ["3.11", "3.12"]
    runs = [step.get("run", "") for step in job["steps"]]
    assert any(r.startswith("make test PYTHON=python${{ matrix.python }}") for r in runs), runs


def test_a_learners_setup_installs_megatron_core_where_it_can(tmp_path):
    """`make setup` (and `make lab`) go on to `make setup-crosscheck`; a failure there is one note,
    not a failed set-up (dry run: nothing is installed)."""
    out = _make("-n", "setup", f"VENV={tmp_path / 'venv'}")
    line = next(x for x in out.splitlines() if "setup-crosscheck" in x and ".stamp-crosscheck" in x)
    assert "|| echo" in line and "could not be installed here" in line and "retry: make setup-crosscheck" in line
    assert re.search(r'--no-deps "megatron-core==[^"]+"', out), "the sub-make's dry run shows the install"
