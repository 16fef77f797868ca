"""``python -m labsupport.train``: chapter 6's training run from the command line.

Entry point only (the command stays short); the code is :mod:`labsupport.training.cli`.

    python -m labsupport.train --config configs/megatron_gpt_tiny.yaml trainer.max_steps=50 \\
        --save-dir work/runs/a --save-every 10 --log work/runs/a/log.jsonl
    torchrun --nproc-per-node 2 -m labsupport.train --config configs/megatron_gpt_tiny.yaml trainer.devices=2

Options may come before or after the ``key=value`` overrides.  Under torchrun spell ``--log`` as
``--log-file``: torchrun's parser sees every argument and rejects ``--log`` as an ambiguous
abbreviation of its own ``--log-dir``/``--logs-specs``.  ``--resume DIR`` continues from the
newest intact checkpoint in DIR (a damaged one is skipped, saying so); ``--resume-if-exists``
does so when DIR (default ``--save-dir``) holds one and starts at step 0 otherwise — the flag a
job restarted by ``torchrun --max-restarts N`` needs.  Under torchrun (``WORLD_SIZE`` set) each
process joins the group with gloo on CPU or NCCL on GPU; multi-node runs use torchrun's own
``--nnodes``/``--rdzv-*`` flags.

Exit status: 0 success · 2 bad input: the command line, a config key or value, the data (an
empty dataset, a zero blend weight, a token id outside the vocabulary), a checkpoint that cannot
be resumed or a changed data plan · 1 the environment or a failed run: a save dir or log that
cannot be written, no space left, a NaN/inf loss, a rank that stopped responding · 130 Ctrl-C.
Each is one line on stderr: ``error: <what and where>: <what to do>``.
"""
import os
import sys

try:
    if os.environ.get("LABSUPPORT_FAULT") == "interrupt-import":   # tests: a Ctrl-C while importing
        raise KeyboardInterrupt
    from labsupport.training.cli import main
except KeyboardInterrupt:  # Ctrl-C while importing (torch takes a while): one line, as main() does
    print("error: interrupted (Ctrl-C) while starting; nothing was written", file=sys.stderr)
    raise SystemExit(130) from None

if __name__ == "__main__":
    raise SystemExit(main())
