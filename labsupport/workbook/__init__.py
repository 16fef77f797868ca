"""The workbook's own machinery, which learners do not study: executing notebooks (``nbrun``,
``runall``), grading (``grade``), generating exercises (``make_exercises``), and chapter 0's
environment check and orientation helpers (``envcheck``, ``orientation``, ``megatron_rules``)."""
