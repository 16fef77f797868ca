"""The training side of chapter 6 (end to end, book §6.2.2 and §6.2.7): one YAML config drives
tokenizer → indexed files → blend → GPT samples → a data-parallel sampler → a tiny GPT.

* :mod:`~labsupport.training.sampler` — Megatron's ``MegatronPretrainingSampler`` (consumed
  samples, micro-batches, each data-parallel rank its own slice);
* :mod:`~labsupport.training.schema` — the run's one typed config, ``RunConfig`` (dataclasses
  read as OmegaConf structured configs, each with its ``validate()``, as Megatron-Bridge's
  ``ConfigContainer``);
* :mod:`~labsupport.training.generations` — the same keys in NeMo 1.x, NeMo 2.0 and Megatron-Bridge
  (checked against their sources, ``upstream_fields.json``);
* :mod:`~labsupport.training.settings` — the NeMo 1.x config read and checked (every bad field
  is a :class:`~labsupport.config.ConfigError` naming it); ``Settings`` = the config plus what it
  resolves to (prefixes, tokenizer, world and data-parallel size);
* :mod:`~labsupport.training.data` — the blend of chapter 3 over chapter 4's GPT samples, the
  collate step, and the naive "tokenize every step + pad" pipeline for comparison;
* :mod:`~labsupport.training.batch_ramp` — the global batch of every step (Megatron's ramp-up and step
  schedule, from ``consumed_samples``);
* :mod:`~labsupport.training.checkpoint` — save/load model, optimizer, RNG states and consumed
  samples (atomic writes; a checkpoint of another config or tokenizer is refused);
* :mod:`~labsupport.training.dist_checkpoint` — the ``torch_dist`` format: a directory with a shard
  per rank (``torch.distributed.checkpoint``), loadable on another number of ranks, async saves;
* :mod:`~labsupport.training.trainer` — ``train(cfg, ...)``: the loop, on one process or as one
  rank of a ``torch.distributed`` group (gradients all-reduced);
* :mod:`~labsupport.training.run_log` — the ``--log`` file reconciled with the step a run starts
  from (every step once);
* :mod:`~labsupport.training.trace` — follow one document from jsonl to its share of the loss.

``python -m labsupport train`` is the command-line entry (:mod:`~labsupport.training.cli`).
"""
