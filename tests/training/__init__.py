"""Chapter 6's trainer, its config, sampler, faults and restarts under torchrun."""
