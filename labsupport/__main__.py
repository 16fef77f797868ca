"""The workbook's commands: ``python -m labsupport <command> [args...]`` (installed: ``labsupport <command>``).

    python -m labsupport preprocess --input data/web.jsonl --tokenizer-model tok.model --output-prefix out/web
    python -m labsupport runall -p seed 1 01 03
    python -m labsupport grade submissions/ --out grades/grades.csv --seed 2718
    python -m labsupport make-exercises --check
    torchrun --standalone --nproc-per-node 2 -m labsupport train trainer.devices=2 --log-file work/runs/b.jsonl

Each command's code, options and exit status are those of its module (:data:`COMMANDS`);
``python -m labsupport <command> --help`` lists its options.  This module imports only the standard
library before it knows the command, so a Ctrl-C while the command's code is still importing (torch
takes a while) is one line on stderr and exit status 130, nothing written: its first statement
installs a SIGINT handler that prints that line and leaves at once (the only code that runs before
it is the interpreter's start-up and ``labsupport/__init__.py``, ~0.07 s, which Python cannot hand
to a handler yet).  While the command runs, the first Ctrl-C raises ``KeyboardInterrupt`` (the
command's ``main`` turns it into its one line and 130) and the ones after it are ignored, so a
second Ctrl-C 30 ms later cannot interrupt that line or the cleanup before it
(:func:`interrupt_once`; the installed ``labsupport`` script alike).  ``python -m labsupport``
alone or with ``-h``/``--help`` prints the commands (exit 0); an unknown command is one line, exit 2.
"""
from __future__ import annotations

import os
import signal
import sys


def _interrupted_while_starting(signum: int, frame: object) -> None:
    """SIGINT before the command's code runs: its one line (or the generic one), exit 130 at once."""
    commands = globals().get("COMMANDS")
    name = sys.argv[1] if len(sys.argv) > 1 else ""
    name = globals().get("ALIASES", {}).get(name, name)
    line = commands[name].interrupted if commands and name in commands else \
        "error: interrupted (Ctrl-C) while starting; nothing was written"
    os.write(2, (line + "\n").encode())  # not print(): the handler may run inside a write to sys.stderr
    os._exit(130)


# not when SIGINT is ignored (a job started with & or nohup): Python itself leaves it ignored then
if __name__ == "__main__" and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, _interrupted_while_starting)

import importlib  # noqa: E402 - after the handler: a Ctrl-C from here on is one line
from typing import NamedTuple, Sequence  # noqa: E402 - after the handler: a Ctrl-C from here on is one line

__all__ = ["COMMANDS", "ALIASES", "PROG", "main", "usage", "interrupt_once"]

PROG = "python -m labsupport"


class Command(NamedTuple):
    module: str        #: the module whose ``main(argv)`` runs the command
    summary: str       #: what it does, one line of the usage listing
    interrupted: str   #: the one line printed on a Ctrl-C while ``module`` is importing


COMMANDS: dict[str, Command] = {
    "preprocess": Command("labsupport.datasets.preprocess",
                          "jsonl → Megatron .bin/.idx/.json, as Megatron's tools/preprocess_data.py (chapter 2)",
                          "preprocess: interrupted (Ctrl-C)"),
    "runall": Command("labsupport.workbook.runall",
                      "run every chapter headless (papermill) and print a table — before class",
                      "runall: interrupted (Ctrl-C)"),
    "grade": Command("labsupport.workbook.grade",
                     "grade a class's exercise notebooks into a gradebook (docs/grading.md)",
                     "grade: interrupted (Ctrl-C)"),
    "make-exercises": Command("labsupport.workbook.make_exercises",
                              "generate exercises/ from solutions/ (--check: is exercises/ up to date?)",
                              "make_exercises: interrupted (Ctrl-C)"),
    "translations": Command("labsupport.workbook.translations",
                            "write the Korean edition ko/ from the English notebooks and translations/ko/*.po "
                            "(--check: in step?)",
                            "translations: interrupted (Ctrl-C)"),
    "build-sequences-per-dataset": Command("labsupport.datasets.sequences_per_dataset",
                                           "a blend's per-prefix counts in one JSON, as Megatron-LM's "
                                           "tools/build_sequences_per_dataset.py (chapter 6)",
                                           "build-sequences-per-dataset: interrupted (Ctrl-C)"),
    "train": Command("labsupport.training.cli",
                     "chapter 6's training run from a YAML config, also under torchrun (docs/training.md)",
                     "error: interrupted (Ctrl-C) while starting; nothing was written"),
}
#: other spellings of a command
ALIASES = {"make_exercises": "make-exercises"}


def interrupt_once(signum: int, frame: object) -> None:
    """SIGINT while a command runs: ``KeyboardInterrupt`` the first time, ignored after that (the
    command is already on its way out; a second Ctrl-C must not cut its one line or its cleanup)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def usage() -> str:
    """The listing ``python -m labsupport --help`` prints: one line per command."""
    width = max(map(len, COMMANDS))
    lines = [f"usage: {PROG} <command> [args...]", "", "commands:"]
    lines += [f"  {name:<{width}}  {cmd.summary}" for name, cmd in COMMANDS.items()]
    lines += ["", f"{PROG} <command> --help lists the options of one command."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``argv[0]`` with the arguments after it; returns the exit status (the command's own, or
    0 for the usage listing, 2 for an unknown command, 130 for a Ctrl-C while importing)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        return 0
    name = ALIASES.get(args[0], args[0])
    if name not in COMMANDS:
        print(f"error: unknown command {args[0]!r}: run {PROG} --help", file=sys.stderr)
        return 2
    command = COMMANDS[name]
    try:
        if os.environ.get("LABSUPPORT_FAULT") == "interrupt-import":   # tests: a Ctrl-C while importing
            raise KeyboardInterrupt
        module = importlib.import_module(command.module)
    except KeyboardInterrupt:  # one line, as the command's main() does once it runs
        print(command.interrupted, file=sys.stderr)
        return 130
    # python -m labsupport (its start-up handler) or the installed `labsupport` script (Python's default
    # handler): one KeyboardInterrupt, then ignored, while the command runs; a host's own handler (a Jupyter
    # kernel's) is left alone.  Python's default is back when the command returns without a Ctrl-C; after
    # one, Ctrl-C stays ignored until the process has left (a second one must not cut the exit short)
    installed = signal.getsignal(signal.SIGINT) in (_interrupted_while_starting, signal.default_int_handler)
    if installed:
        signal.signal(signal.SIGINT, interrupt_once)
    try:
        return module.main(args[1:])
    finally:
        if installed and signal.getsignal(signal.SIGINT) is interrupt_once:
            signal.signal(signal.SIGINT, signal.default_int_handler)


if __name__ == "__main__":
    raise SystemExit(main())
