"""One entry point (issue #28 item 6): ``python -m labsupport <command>`` (``labsupport/__main__.py``,
also the ``labsupport`` script of pyproject's ``[project.scripts]``) instead of five shim modules
named like the real ones.  The usage listing, an unknown command, every command's ``--help``, a
Ctrl-C while a command's code is still importing, and no shim module left in ``labsupport/``."""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib

import pytest

from labsupport import __main__ as entry
from labsupport.paths import REPO_ROOT

NAMES = ["preprocess", "runall", "grade", "make-exercises", "translations", "build-sequences-per-dataset", "train"]
#: the one line a Ctrl-C while importing prints, per command (as the shims printed it)
INTERRUPTED = {
    "preprocess": "preprocess: interrupted (Ctrl-C)",
    "runall": "runall: interrupted (Ctrl-C)",
    "grade": "grade: interrupted (Ctrl-C)",
    "make-exercises": "make_exercises: interrupted (Ctrl-C)",
    "translations": "translations: interrupted (Ctrl-C)",
    "build-sequences-per-dataset": "build-sequences-per-dataset: interrupted (Ctrl-C)",
    "train": "error: interrupted (Ctrl-C) while starting; nothing was written",
}
BASE_MODULES = {"__init__", "__main__", "cli", "config", "env", "fileio", "paths", "progress", "stack_facts"}


def _run(*args: str, cwd=REPO_ROOT, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k != "LABSUPPORT_FAULT"}
    full.update(PYTHONPATH=str(REPO_ROOT), **env)
    return subprocess.run([sys.executable, "-m", "labsupport", *args], cwd=cwd, env=full, capture_output=True,
                          text=True, timeout=120)


def test_the_commands_are_the_seven_and_each_names_a_module_with_main():
    assert list(entry.COMMANDS) == NAMES and entry.ALIASES == {"make_exercises": "make-exercises"}
    for name, command in entry.COMMANDS.items():
        module = __import__(command.module, fromlist=["main"])
        assert callable(module.main), name
        assert command.interrupted == INTERRUPTED[name]


@pytest.mark.parametrize("argv", [[], ["-h"], ["--help"]], ids=["none", "-h", "--help"])
def test_no_command_or_help_lists_the_commands_one_line_each(argv, capsys):
    assert entry.main(argv) == 0
    out, err = capsys.readouterr()
    assert err == "" and out.startswith("usage: python -m labsupport <command> [args...]\n")
    for name in NAMES:
        lines = [line for line in out.splitlines() if re.match(rf"  {re.escape(name)} +\S", line)]
        assert len(lines) == 1, (name, out)
        assert len(lines[0].split(None, 1)[1]) > 20, lines[0]       # says what it does
    assert "python -m labsupport <command> --help" in out


@pytest.mark.parametrize("bad", ["trian", "labsupport.train", "--version", "make exercises"])
def test_an_unknown_command_is_one_line_and_2(bad, capsys):
    assert entry.main([bad, "--help"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [f"error: unknown command {bad!r}: run python -m labsupport --help"]


@pytest.mark.parametrize("name", [*NAMES, "make_exercises"])
def test_each_commands_help_exits_0_and_names_the_command(name, capsys):
    try:
        status = entry.main([name, "--help"])
    except SystemExit as stop:          # argparse's own exit (preprocess returns it instead)
        status = stop.code
    assert status in (0, None)
    out, err = capsys.readouterr()
    shown = entry.ALIASES.get(name, name)
    assert out.startswith(f"usage: python -m labsupport {shown} "), out[:200]
    assert err == ""


@pytest.mark.parametrize("name", [*NAMES, "make_exercises"])
def test_ctrl_c_while_importing_is_the_commands_line_and_130(name, capsys, monkeypatch):
    monkeypatch.setenv("LABSUPPORT_FAULT", "interrupt-import")
    assert entry.main([name, "--help"]) == 130
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [INTERRUPTED[entry.ALIASES.get(name, name)]]


def test_while_a_command_runs_the_first_ctrl_c_interrupts_and_the_next_are_ignored(monkeypatch):
    """The installed ``labsupport`` script starts with Python's default handler: the command runs under
    interrupt_once as under python -m, and the handler before is back afterwards."""
    import signal
    import types

    seen = []
    fake = types.ModuleType("fake_command")
    fake.main = lambda argv: seen.append(signal.getsignal(signal.SIGINT)) or 0
    monkeypatch.setitem(sys.modules, "fake_command", fake)
    monkeypatch.setitem(entry.COMMANDS, "fake", entry.Command("fake_command", "a test", "fake: interrupted"))
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert entry.main(["fake"]) == 0
        assert seen == [entry.interrupt_once] and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        host = lambda signum, frame: None                              # noqa: E731 - a host's own handler
        signal.signal(signal.SIGINT, host)
        assert entry.main(["fake"]) == 0
        assert seen[-1] is host and signal.getsignal(signal.SIGINT) is host   # a Jupyter kernel's: untouched
        signal.signal(signal.SIGINT, signal.default_int_handler)

        def interrupted(argv):                                          # the command had its Ctrl-C
            signal.signal(signal.SIGINT, signal.SIG_IGN)                # what interrupt_once leaves
            return 130

        fake.main = interrupted
        assert entry.main(["fake"]) == 130
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN        # a second Ctrl-C stays ignored to the exit
    finally:
        signal.signal(signal.SIGINT, before)


def test_the_script_is_the_entry_point():
    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert scripts == {"labsupport": "labsupport.__main__:main"}


def test_no_shim_modules_beside_the_base_modules():
    top = {p.stem for p in (REPO_ROOT / "labsupport").glob("*.py")}
    assert top == BASE_MODULES, f"labsupport/*.py beside the base modules: {sorted(top - BASE_MODULES)}"


# --- as a user runs them: fresh processes (slow: tests/conftest.py lists them) ----------------------
def test_python_dash_m_labsupport_lists_and_refuses():
    listing = _run()
    assert listing.returncode == 0 and listing.stderr == "", listing.stderr
    assert all(f"  {name} " in listing.stdout for name in NAMES)
    bad = _run("nope")
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.splitlines() == ["error: unknown command 'nope': run python -m labsupport --help"]
    usage = _run("train", "--bogus")
    assert usage.returncode == 2 and usage.stderr.splitlines() == ["error: unrecognized arguments: --bogus"]


@pytest.mark.parametrize("name", NAMES)
def test_ctrl_c_while_importing_in_a_fresh_process(name, tmp_path):
    done = _run(name, "--help", cwd=tmp_path, LABSUPPORT_FAULT="interrupt-import")
    assert done.returncode == 130, done.stderr
    assert done.stdout == "" and done.stderr.splitlines() == [INTERRUPTED[name]]
    assert list(tmp_path.iterdir()) == []                                  # nothing written


def test_the_package_and_its_entry_import_no_numpy_before_the_command_is_known():
    """A Ctrl-C at once lands in __main__'s try: nothing before it imports more than the stdlib and
    labsupport.paths (the env names are loaded on first use, PEP 562)."""
    allowed = set(sys.stdlib_module_names) | {"labsupport", "labsupport.paths", "__future__"}
    for name in ("__init__.py", "__main__.py", "paths.py"):
        tree = ast.parse((REPO_ROOT / "labsupport" / name).read_text(encoding="utf-8"))
        top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        modules = [a.name for n in top if isinstance(n, ast.Import) for a in n.names]
        modules += [n.module for n in top if isinstance(n, ast.ImportFrom) and n.module]
        assert {m.split(".")[0] if not m.startswith("labsupport") else m for m in modules} <= allowed, name
