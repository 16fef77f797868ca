"""Chapter 5's collectives and NCCL tuning model (labsupport.distributed)."""
