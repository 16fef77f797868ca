"""What a chapter page draws or prints: figures, tables, panels, probes and the environment check that the
notebooks show. Nothing here is reference arithmetic a check compares with (that lives in the layer it
belongs to, e.g. :mod:`labsupport.distributed.gpu_grid`), and nothing here runs, generates or grades
notebooks (that is :mod:`labsupport.workbook`).

| module | chapter | what |
|---|---|---|
| ``orientation_figures`` | 0 | the data-path diagram and the GPU grid of a parallel layout |
| ``envcheck`` | 0 | this machine against the training-environment Q&A's checklist; the frameworks it names, dated |
| ``megatron_rules`` | 0 | megatron-core's own errors for the layout rules it enforces (runs megatron-core on a CPU) |
| ``figures`` | 2 | the ``.idx`` → ``.bin`` picture and the loader-starvation chart |
| ``memprobe`` | 2 | memory of several loader processes reading one ``.bin`` (loaded vs memory-mapped) |
| ``blending_plots`` | 3 | epochs per dataset of a blend against its warning threshold |
| ``collectives_plots`` | 5 | before/after per rank, the ring's steps, the all-reduce sweep against the α–β model |
| ``trace_panel`` | 6 | *Trace one document*: its table, its mask and loss figure, the interactive panel |
| ``tables`` | 0–6 | ``Table`` / ``show_table``: HTML in JupyterLab, aligned text elsewhere |
| ``optional_megatron`` | 0–4 | the line a cell prints where megatron-core is not installed |
"""
