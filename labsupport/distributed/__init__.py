"""The distributed side: collectives and process groups (chapter 5; chapter 6's data parallelism), and
chapter 0's layout and memory arithmetic.

| module | what |
|---|---|
| ``collectives`` | ring all-reduce simulated step by step, nccl-tests' algbw/busbw, α–β cost model, training traffic |
| ``launch`` | ``run_workers``: a real ``torch.distributed`` group started from a notebook cell |
| ``workers`` | functions that run inside the ranks (the book's collectives, the ring from send/recv, timing loops) |
| ``gpu_grid`` | chapter 0: Megatron-Core's rank → (TP, PP, DP) order, what TP across nodes costs, ``check_layout`` |
| ``training_memory`` | chapter 0: bytes per parameter one replica holds; the Kubernetes guide's GPU table |
| ``nccl_tuning`` | NCCL 2.30.7's tuner model from its source: algorithms, protocols, hop and ring/tree/NVLS latencies |
| ``hardware`` | the one hardware profile (H100 SXM node) that chapters 0 and 5 price communication with |
| ``nccl_facts`` | the NCCL environment variables of the NeMo-on-Kubernetes guide's NCCL deep dive, fact-checked |
"""
