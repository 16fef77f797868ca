"""Where the workbook's files live, independent of the notebook's working directory.

Used by every chapter: corpora in ``data/``, generated artefacts (tokenizer models,
.bin/.idx prefixes, packed sets) in a work folder that is not committed.
"""
from __future__ import annotations

import os
from pathlib import Path

#: Root of the repository (the folder holding ``labsupport/``, ``data/``, ``notebooks/``).
REPO_ROOT: Path = Path(__file__).resolve().parent.parent
#: The shipped corpora (jsonl), see ``data/README.md``.
DATA_DIR: Path = REPO_ROOT / "data"
#: The book's example configs (YAML).
CONFIG_DIR: Path = REPO_ROOT / "configs"

DOMAINS: tuple[str, ...] = ("web", "code", "books", "korean")


def data_file(name: str) -> Path:
    """Path of a shipped corpus: ``data_file("web")`` → ``<repo>/data/web.jsonl``.

    Raises FileNotFoundError naming the file and how to rebuild it when it is missing.
    """
    path = DATA_DIR / (name if name.endswith(".jsonl") else f"{name}.jsonl")
    if not path.is_file():
        raise FileNotFoundError(
            f"corpus {path.name!r} not found in {DATA_DIR}: the data ships with the repository; "
            "run `make data` to rebuild it from offline sources"
        )
    return path


def work_dir(*parts: str) -> Path:
    """A folder for generated artefacts, created on demand.

    ``$LABSUPPORT_WORK`` if set, else ``<repo>/work`` (git-ignored). Artefacts there are
    rebuilt deterministically when missing, so deleting the folder is always safe.
    """
    base = Path(os.environ.get("LABSUPPORT_WORK", REPO_ROOT / "work"))
    path = base.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _workbook_relative(path: os.PathLike | str) -> str | None:
    p = Path(path).resolve()
    work = Path(os.environ.get("LABSUPPORT_WORK", REPO_ROOT / "work")).resolve()
    for base, label in ((REPO_ROOT, ""), (work, "work/")):
        try:
            return label + p.relative_to(base).as_posix()
        except ValueError:
            continue
    return None


def display_path(path: os.PathLike | str) -> str:
    """A path as shown in notebook output: relative to the repository, never machine-specific
    (``<repo>/data/web.jsonl`` → ``data/web.jsonl``; a file elsewhere → its name)."""
    return _workbook_relative(path) or Path(path).name


def shown_path(path: os.PathLike | str) -> str:
    """A path as named in an error message or a record: repo-relative for the workbook's own
    files (as :func:`display_path`), else the path exactly as the caller gave it, so the learner
    can find their own file."""
    return _workbook_relative(path) or os.fspath(path)
