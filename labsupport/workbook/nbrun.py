"""Executing notebooks headless — shared by ``runall`` (instructors, ``make outputs``) and ``grade``.

Not a chapter topic: this is the workbook's own tooling.
"""
from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Iterator

import nbformat
from labsupport.fileio import atomic_write

KERNEL = "python3"


@dataclass
class RunResult:
    """One notebook execution: where, how long (seconds), and whether it failed."""

    path: Path
    seconds: float
    ok: bool
    error: str = ""


def headless_env(**extra: str) -> dict[str, str]:
    """Environment for a headless kernel (plain progress bars, static widget fallbacks)."""
    env = dict(os.environ)
    env.update({"LABSUPPORT_HEADLESS": "1", "PYTHONHASHSEED": "0", "MPLBACKEND": "module://matplotlib_inline.backend_inline"})
    env.update(extra)
    return env


@contextmanager
def process_env(env: dict[str, str]) -> Iterator[None]:
    """Run the body with ``os.environ`` replaced by ``env``, restored afterwards (kernels started
    inside inherit it: nbclient and papermill take the kernel's environment from this process)."""
    saved = os.environ.copy()
    try:
        os.environ.clear()
        os.environ.update(env)
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def kernel_manager_with_stderr(sink: IO[bytes]) -> type:
    """A jupyter_client kernel manager whose kernels write their stderr to ``sink`` (a file),
    not to this process's: ``runall`` shows it after a run, and drops it after a Ctrl-C, when
    ipykernel logs a ~20-line ZMQ traceback while it is shut down mid-cell."""
    from jupyter_client.manager import AsyncKernelManager  # noqa: PLC0415 - only when a notebook runs (start-up time)

    class KernelManagerWithStderr(AsyncKernelManager):
        async def start_kernel(self, **kw: Any) -> None:  # type: ignore[override]
            kw.setdefault("stderr", sink)
            await super().start_kernel(**kw)

    return KernelManagerWithStderr


def write_notebook(nb: nbformat.NotebookNode, path: Path) -> None:
    """Write a notebook to ``path`` via a temporary file and a rename (never half-written)."""
    text = nbformat.writes(nb)
    atomic_write(path, text if text.endswith("\n") else text + "\n")


def execute_notebook(path: Path, timeout: int = 600, env: dict[str, str] | None = None,
                     allow_errors: bool = False) -> tuple[nbformat.NotebookNode, RunResult]:
    """Execute ``path`` top to bottom with its own folder as cwd and return the executed notebook
    (in memory: the file is not touched; ``runall --in-place`` writes it back with
    :func:`write_notebook`).

    No timing or widget-state metadata is stored, so re-running an unchanged notebook gives
    an unchanged file (apart from timing outputs in ``nbval-ignore-output`` cells).
    """
    from nbclient import NotebookClient  # noqa: PLC0415 - nbclient only when a notebook runs (start-up time)
    from nbclient.exceptions import CellExecutionError  # noqa: PLC0415 - nbclient only when a notebook runs (start-up time)

    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, timeout=timeout, kernel_name=KERNEL, allow_errors=allow_errors,
        record_timing=False, store_widget_state=False,
        resources={"metadata": {"path": str(path.parent)}},
    )
    start = time.perf_counter()
    error = ""
    try:
        with process_env(env or headless_env()):
            client.execute()
        ok = True
    except CellExecutionError as exc:
        ok, error = False, f"{exc.ename}: {first_line(exc.evalue)}"
    except Exception as exc:  # noqa: BLE001 - kernel died, timeout, ...
        ok, error = False, f"{type(exc).__name__}: {first_line(str(exc))}"
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
    nb.metadata.pop("widgets", None)
    return nb, RunResult(path, time.perf_counter() - start, ok, error)


def first_line(text: str, default: str = "") -> str:
    for line in text.splitlines():
        line = line.strip()
        if line and not set(line) <= set("-"):
            return line[:200]
    return default
