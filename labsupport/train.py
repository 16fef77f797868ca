"""``python -m labsupport.train``: chapter 6's training run from the command line.

    python -m labsupport.train --config configs/megatron_gpt_tiny.yaml trainer.max_steps=50 \\
        --save-dir work/runs/a --save-every 10 --log work/runs/a/log.jsonl
    torchrun --nproc-per-node 2 -m labsupport.train --config configs/megatron_gpt_tiny.yaml trainer.devices=2

Options may come before or after the ``key=value`` overrides.  Under torchrun spell ``--log`` as
``--log-file``: torchrun's parser sees every argument and rejects ``--log`` as an ambiguous
abbreviation of its own ``--log-dir``/``--logs-specs``.  ``--resume DIR`` continues from the
latest checkpoint in DIR.  Under torchrun (``WORLD_SIZE`` set) each process joins the group with
gloo on CPU or NCCL on GPU; multi-node runs use torchrun's own ``--nnodes``/``--rdzv-*`` flags.

Exit status: 0 success · 2 a bad command line, config key or value, data prefix or resume
(one line on stderr: ``error: <field>: <what to do>``) · 1 anything else (a traceback).
"""
from labsupport.training.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
