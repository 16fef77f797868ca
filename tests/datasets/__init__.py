"""labsupport.datasets on its own (chapters 1–4, 6): tokenizers, indexed files, blending, packing, preprocessing."""
