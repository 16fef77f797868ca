"""labsupport against the real megatron-core package (marker `crosscheck`)."""
