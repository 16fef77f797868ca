"""Megatron-Core's layout rules, shown by running megatron-core itself (chapter 0).

Each case breaks one rule and returns the error megatron-core raises, so chapter 0 prints
Megatron's own words next to :func:`labsupport.config.parallel_layout`'s (whose rule table,
``labsupport.config.LAYOUT_RULES``, names the same rules with their source lines). Runs on a CPU: the
TransformerConfig checks need no GPU, ``initialize_model_parallel`` is called in a one-process gloo
group, and the FFN rule calls ``megatron.core.utils.divide``, the check ``ColumnParallelLinear`` makes
on its output size (a TP layer itself needs a TP group). The two sequence rules are not run here:
sequence parallelism's check needs a TP group (``tensor_parallel/mappings.py``) and context
parallelism's lives in Megatron-LM's ``megatron/training/arguments.py``, outside the megatron-core
package. Checked against megatron-core 0.16.1.
"""
from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

#: (rule, where in megatron-core, kwargs of the case that breaks it)
CASES: tuple[tuple[str, str, dict], ...] = (
    ("attention heads divide by TP", "TransformerConfig.__post_init__",
     dict(num_layers=32, hidden_size=4096, num_attention_heads=12, tensor_model_parallel_size=8)),
    ("KV groups are a multiple or a divisor of TP", "TransformerConfig.__post_init__",
     dict(num_layers=32, hidden_size=4096, num_attention_heads=32, num_query_groups=3, tensor_model_parallel_size=8)),
    ("layers divide by PP (even split)", "transformer_block.get_num_layers_to_build",
     dict(num_layers=30, hidden_size=4096, num_attention_heads=32, pipeline_model_parallel_size=4)),
    ("the world divides by TP × PP × CP", "parallel_state.initialize_model_parallel",
     dict(tensor_model_parallel_size=2, pipeline_model_parallel_size=1, context_parallel_size=1)),
    ("the FFN hidden size divides by TP", "utils.divide (ColumnParallelLinear)",
     dict(numerator=11006, denominator=8)),
    ("the layers divide by PP × VP (interleaved)", "transformer_block.get_num_layers_to_build",
     dict(num_layers=24, hidden_size=4096, num_attention_heads=32, pipeline_model_parallel_size=4,
          virtual_pipeline_model_parallel_size=4)),
)


def megatron_core_version() -> str | None:
    """The installed megatron-core's version, or None when it is not installed."""
    try:
        with warnings.catch_warnings():   # megatron.core warns on import when Transformer Engine / Apex are absent
            warnings.simplefilter("ignore")
            from megatron.core import package_info  # noqa: PLC0415 - megatron-core is an optional dependency
    except ImportError:
        return None
    return package_info.__version__


def _transformer_config(kwargs: dict):
    import torch  # noqa: PLC0415 - torch with the optional megatron-core (start-up time)
    from megatron.core.transformer.transformer_config import TransformerConfig  # noqa: PLC0415 - megatron-core is an optional dependency

    if kwargs.get("pipeline_model_parallel_size", 1) > 1:
        kwargs = {**kwargs, "pipeline_dtype": torch.bfloat16}   # Megatron requires it with PP
    return TransformerConfig(**kwargs)


def _run(where: str, kwargs: dict) -> None:
    if where == "TransformerConfig.__post_init__":
        _transformer_config(kwargs)
    elif where == "transformer_block.get_num_layers_to_build":
        from megatron.core.transformer.transformer_block import get_num_layers_to_build  # noqa: PLC0415 - megatron-core is an optional dependency

        config = _transformer_config(kwargs)
        get_num_layers_to_build(config, vp_stage=0 if config.virtual_pipeline_model_parallel_size else None,
                                pp_rank=0)
    elif where.startswith("utils.divide"):
        from megatron.core.utils import divide  # noqa: PLC0415 - megatron-core is an optional dependency

        divide(kwargs["numerator"], kwargs["denominator"])
    else:
        _initialize_in_one_process(kwargs)


def _initialize_in_one_process(kwargs: dict) -> None:
    """``initialize_model_parallel(**kwargs)`` in a gloo group of one process (world size 1)."""
    import torch.distributed as dist  # noqa: PLC0415 - torch with the optional megatron-core (start-up time)
    from megatron.core import parallel_state  # noqa: PLC0415 - megatron-core is an optional dependency

    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method=f"file://{Path(tmp) / 'rendezvous'}", rank=0, world_size=1)
        try:
            parallel_state.initialize_model_parallel(**kwargs)
        finally:
            parallel_state.destroy_model_parallel()
            dist.destroy_process_group()


def broken_rules() -> list[tuple[str, str, str]]:
    """(rule, where, megatron-core's error as ``Type: message``) for each of :data:`CASES`.

    Raises ImportError when megatron-core is not installed, and RuntimeError when a case that
    should break a rule passes (a newer megatron-core that changed its rules).
    """
    rows = []
    for rule, where, kwargs in CASES:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                _run(where, dict(kwargs))
        except (ValueError, AssertionError, RuntimeError) as exc:
            rows.append((rule, where, f"{type(exc).__name__}: {exc}"))
            continue
        raise RuntimeError(f"megatron-core {megatron_core_version()} accepted {kwargs} ({where}): "
                           f"the rule '{rule}' changed; update labsupport/pages/megatron_rules.py")
    return rows
