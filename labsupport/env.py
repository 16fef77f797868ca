"""Seeds, print options and device choice — the first cell of every chapter (all chapters).

``setup()`` makes a run reproducible (fixed seeds, fixed print widths, small figures) and
reports the device; ``device()`` picks CUDA when it is there, else the CPU.
"""
from __future__ import annotations

from pathlib import Path
import json
import os
import random
import sys
import textwrap
from typing import Any

import numpy as np
from labsupport.paths import REPO_ROOT

_DEVICE_CHOICES = ("auto", "cpu", "cuda")

#: What a `requires-gpu` cell prints on a machine without CUDA.
NO_GPU_NOTE = "No CUDA device here: this cell runs on a GPU machine (make test-gpu)."


def cuda_available() -> bool:
    """True when torch is importable and sees at least one CUDA device."""
    try:
        import torch  # noqa: PLC0415 - torch only when called (start-up time of the importing command)
    except ImportError:  # pragma: no cover - torch is a hard dependency
        return False
    return bool(torch.cuda.is_available())


def is_headless() -> bool:
    """True when the notebook runs unattended (papermill, nbval, ``make outputs``).

    Headless runs use plain-text progress bars on stderr and the static fallback of
    interactive panels, so their stored output is deterministic.
    """
    return os.environ.get("LABSUPPORT_HEADLESS", "") not in ("", "0")


def device(prefer: str = "auto"):
    """The torch device to use: ``"auto"`` → cuda if available else cpu.

    ``prefer="cuda"`` without a GPU raises RuntimeError saying so (instead of failing
    later inside a kernel launch).
    """
    import torch  # noqa: PLC0415 - torch only when called (start-up time of the importing command)

    if prefer not in _DEVICE_CHOICES:
        raise ValueError(f"device must be one of {_DEVICE_CHOICES}, got {prefer!r}")
    if prefer == "cpu":
        return torch.device("cpu")
    if cuda_available():
        return torch.device("cuda")
    if prefer == "cuda":
        raise RuntimeError(
            "device='cuda' was requested but torch sees no CUDA device "
            f"(torch {torch.__version__}); use device='auto' or 'cpu'"
        )
    return torch.device("cpu")


# Text printed into a notebook (the checks' feedback, say()) is folded at word boundaries to this many characters
# a line: JupyterLab's output CSS breaks a long line anywhere (word-break: break-all), mid-word, and 100 monospace
# characters fit a laptop's 960 px output (scripts/browser_check.py measures it), the width of setup()'s numpy and
# torch print options. Only the layout changes: the words do not, and a terminal, a log, pytest's capture and the
# grader's sink get one line per message.
PAGE_WIDTH = 100


def _on_a_page() -> bool:
    """Does stdout go to a notebook (an ipykernel stream) rather than a terminal, a file or a capture?"""
    return type(sys.stdout).__module__.startswith("ipykernel")


def for_the_page(text: str) -> str:
    """``text`` as the checks print it: :func:`fold`-ed when stdout is a notebook's, unchanged elsewhere."""
    return fold(text) if _on_a_page() else text


def fold(line: str, width: int = PAGE_WIDTH) -> str:
    """``line`` with each of its lines longer than ``width`` broken at spaces (never inside a word, a path or a
    ``--flag``); continuation lines are indented 3 more than the line they continue. Short lines are unchanged."""
    out = []
    for part in line.split("\n"):
        if len(part) <= width:
            out.append(part)
            continue
        indent = part[:len(part) - len(part.lstrip(" "))]
        out.append(textwrap.fill(part, width, initial_indent="", subsequent_indent=indent + "   ",
                                 break_long_words=False, break_on_hyphens=False, expand_tabs=False,
                                 replace_whitespace=False, drop_whitespace=True) if part.strip() else part)
    return "\n".join(out)


def say(*values: Any, sep: str = " ") -> None:
    """``print(*values, sep=sep)``, folded at word boundaries when it goes to a notebook (:func:`for_the_page`)."""
    print(for_the_page(sep.join(str(v) for v in values)))


_resolve_device = device  # setup() takes a parameter of the same name

#: JupyterLab breaks a text output line that is wider than the output area anywhere, mid-word
#: (``word-break: break-all`` on its ``pre``); this style, shown once by :func:`setup` in a notebook,
#: wraps it at spaces and breaks only a word longer than the whole line (scripts/browser_check.py measures it)
PAGE_STYLE = ("<style>.jp-OutputArea-output pre, .jp-RenderedText pre "
              "{word-break: normal; overflow-wrap: anywhere;}</style>")


def _style_the_page() -> None:
    """In a notebook: :data:`PAGE_STYLE` as an HTML output with an empty text form (nothing shows elsewhere)."""
    if _on_a_page():
        from IPython.display import display  # noqa: PLC0415 - IPython only inside a kernel

        display({"text/html": PAGE_STYLE, "text/plain": ""}, raw=True)


def setup(seed: int = 0, device: str = "auto", quiet: bool = False):
    """Fix seeds (random, numpy, torch), print options and figure defaults; return the device.

    In a notebook it also styles the page's text outputs to wrap at word boundaries (:data:`PAGE_STYLE`).
    Prints one line such as ``labsupport ready · seed 0 · device cpu`` unless ``quiet``.
    """
    import torch  # noqa: PLC0415 - torch only when called (start-up time of the importing command)

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    np.set_printoptions(linewidth=100, precision=4, suppress=True, threshold=200)
    torch.set_printoptions(linewidth=100, precision=4, sci_mode=False)
    try:
        import matplotlib as mpl  # noqa: PLC0415 - matplotlib only when a figure is drawn (start-up time)

        mpl.rcParams.update({"figure.dpi": 96, "savefig.dpi": 96, "figure.figsize": (7.0, 3.6),
                             "axes.grid": True, "grid.alpha": 0.3})
    except ImportError:  # pragma: no cover
        pass
    dev = _resolve_device(device)
    _style_the_page()
    if not quiet:
        print(f"labsupport ready · seed {seed} · device {dev.type}")
    return dev


def measured_on_gpu(section: str, results_file: "os.PathLike | str | None" = None) -> str:
    """What a GPU machine measured for a ``requires-gpu`` cell, quoted from the committed
    ``benchmarks/results/gpu.json`` (written by ``make gpu-report``), as lines to print.

    ``section``: ``"environment"`` (chapter 0), ``"attention"`` and ``"packing_throughput"``
    (chapter 4), ``"collectives"`` (chapter 5), ``"end_to_end"`` (chapter 6).  Says so plainly when
    no GPU measurement has been committed (a file written with ``--device cpu`` holds toy numbers and is not quoted).
    """


    sections = ("environment", "attention", "packing_throughput", "collectives", "end_to_end")
    if section not in sections:
        raise ValueError(f"measured_on_gpu: no section {section!r} ({', '.join(sections)})")
    path = Path(results_file) if results_file is not None else REPO_ROOT / "benchmarks" / "results" / "gpu.json"
    missing = (f"No GPU measurement committed yet ({path.name}): `make gpu-report` on a CUDA machine "
               "writes it, and this cell then quotes it.")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return missing
    env = data.get("environment", {})
    if env.get("device_type") != "cuda" or section not in data:
        return missing
    head = (f"Measured on {env.get('device_name')} × {env.get('device_count')} ({env.get('date_utc')} UTC, "
            f"torch {env.get('torch')}, CUDA {env.get('cuda')}, NCCL {env.get('nccl')}) — {path.name}:")
    s = data[section]
    if section == "environment":
        body = [f"  {env.get('memory_gib')} GiB, compute capability {env.get('compute_capability')}, "
                f"bf16 {'supported' if env.get('bf16_supported') else 'not supported'}"]
        if "test_gpu" in data:
            t = data["test_gpu"]
            body.append(f"  make test-gpu: {t['passed']} passed, {t['failures'] + t['errors']} failed, "
                        f"{t['skipped']} skipped in {t['seconds']} s")
    elif section == "attention":
        body = [f"  {s['path']}: max |difference| to per-document SDPA {s['max_abs_difference']:.2e} "
                f"({s['dtype']}, one packed row of {s['seq_length']} tokens, {s['documents']} documents)"]
    elif section == "packing_throughput":
        body = [f"  {name:6}: {s[name]['real_tokens_per_s']:>12,.0f} real tokens/s" for name in ("padded", "packed")]
        body.append(f"  packed / padded: {s['packed_over_padded']:.1f}× ({s['parameters'] / 1e6:.0f} M parameters, "
                    f"sequence {s['seq_length']}, {s['precision']})")
    elif section == "end_to_end":
        body = [f"  {s['config']} with {' '.join(s['overrides'])}: loss {s['first_loss']:.2f} → {s['last_loss']:.2f} "
                f"in {s['steps']} steps, {s['median_tokens_per_s']:,.0f} tokens/s (median)"]
    else:  # collectives
        if "all_reduce" in s:
            body = [f"  all_reduce {r['bytes']:>11,} B: {r['seconds'] * 1e6:9.1f} µs  algbw {r['algbw_GBps']:7.1f} GB/s"
                    f"  busbw {r['busbw_GBps']:7.1f} GB/s" for r in s["all_reduce"]]
        else:
            body = [f"  {s['note']}"]
            body += [f"  local copy {r['bytes']:>11,} B: {r['GBps_read_plus_write']:8.1f} GB/s (read + write)"
                     for r in s["local_copy"][-3:]]
        for name, p in s.get("alpha_beta_predictions", {}).items():
            big = p["all_reduce"][-1]
            body.append(f"  α–β model, {name}: all_reduce of {big['bytes']:,} B ≈ {big['seconds'] * 1e3:.2f} ms, "
                        f"busbw {big['busbw_GBps']:.0f} GB/s")
    return "\n".join([head, *body])
