"""The distributed side: collectives and process groups (chapter 5; chapter 6's data parallelism).

| module | what |
|---|---|
| ``collectives`` | ring all-reduce simulated step by step, nccl-tests' algbw/busbw, the α–β cost model, training traffic |
| ``launch`` | ``run_workers``: a real ``torch.distributed`` group started from a notebook cell |
| ``workers`` | functions that run inside the ranks (the book's collectives, the ring from send/recv, timing loops) |
| ``plots`` | chapter 5's figures |
| ``nccl_facts`` | the NCCL guide's environment variables (the NeMo-on-Kubernetes guide's NCCL deep dive), fact-checked |
"""
