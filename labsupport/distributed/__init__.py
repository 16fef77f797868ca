"""The distributed side: collectives and process groups (chapter 5; chapter 6's data parallelism).

| module | what |
|---|---|
| ``collectives`` | ring all-reduce simulated step by step, nccl-tests' algbw/busbw, the α–β cost model, training traffic |
| ``launch`` | ``run_workers``: a real ``torch.distributed`` group started from a notebook cell |
| ``workers`` | functions that run inside the ranks (the book's collectives, the ring from send/recv, timing loops) |
| ``plots`` | chapter 5's figures |
| ``nccl_tuning`` | NCCL 2.30.7's tuner model from its source: algorithms, protocols, per-hop latencies, ring/tree/NVLS latency |
| ``hardware`` | the one hardware profile (H100 SXM node) that chapters 0 and 5 price communication with |
| ``nccl_facts`` | the NCCL guide's environment variables (the NeMo-on-Kubernetes guide's NCCL deep dive), fact-checked |
"""
