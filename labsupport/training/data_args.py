"""``python -m labsupport train --data-args-path FILE``: a blend given as a file — chapter 6.

Megatron-LM's ``--data-args-path`` (core_v0.16.1 ``megatron/training/arguments.py`` 2457, read in
``megatron/training/utils.py`` ``get_blend_and_blend_per_split``, 483–486) exists because a blend of
hundreds of prefixes is too long for a command line: the file holds what ``--data-path`` would, split on
whitespace (``get_blend_from_list(f.read().split())``) — ``weight prefix weight prefix …`` or prefixes
alone — and it cannot be combined with ``--data-path`` (an assert there; here a usage error).

Here the file becomes the override ``model.data.data_prefix=[…]``, so everything after it (the checks of
:func:`labsupport.datasets.blending.get_blend_from_list`, prefix resolution from the repository root,
the tokenizer guard) is what a ``data_prefix`` in the YAML gets.
"""
from __future__ import annotations

import os

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from labsupport.config import ConfigError
from labsupport.datasets import blend_files
from labsupport.datasets.blending import BlendError

__all__ = ["data_prefix_override", "read_data_args"]

_KEY = "model.data.data_prefix"


def read_data_args(path: str | os.PathLike) -> list[float | str]:
    """The blend in ``path`` as a ``data_prefix`` list: weights as floats, prefixes as strings.

    ConfigError (one line, starting ``--data-args-path``) for a file that cannot be read or a blend
    Megatron would misread (odd pairs, a negative weight, …): :mod:`labsupport.datasets.blend_files`."""
    try:
        prefixes, weights = blend_files.read_data_args(path)
    except BlendError as exc:
        raise ConfigError(str(exc)) from None
    if weights is None:
        return list(prefixes)
    return [x for w, p in zip(weights, prefixes) for x in (float(w), p)]


def _quoted(prefix: str) -> str:
    return "'" + prefix.replace("\\", "\\\\").replace("'", "\\'").replace("${", "\\${") + "'"


def data_prefix_override(path: str | os.PathLike) -> str:
    """The override ``model.data.data_prefix=[…]`` that puts the file's blend in the config; checked to
    read back as exactly the file's list (else ConfigError naming the prefix)."""
    items = read_data_args(path)
    values = [repr(x) if isinstance(x, float) else _quoted(x) for x in items]
    override = f"{_KEY}=[{','.join(values)}]"
    try:
        back = OmegaConf.to_container(OmegaConf.from_dotlist([override]), resolve=True)["model"]["data"]["data_prefix"]
    except (OmegaConfBaseException, yaml.YAMLError, KeyError, TypeError):   # OmegaConf parses the value as YAML
        back = None
    if back != items:
        odd = [x for x in items if isinstance(x, str) and any(c in x for c in ("'", "\\", "${"))]
        bad = odd[0] if odd else next((x for x, y in zip(items, back or []) if x != y), items[-1])
        raise ConfigError(f"--data-args-path {os.fspath(path)}: the prefix {bad!r} does not survive as a config "
                          "value; rename it (no quotes, backslashes or '${')")
    return override
