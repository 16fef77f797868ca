"""The workbook's own machinery, which learners do not study: executing notebooks (``nbrun``,
``runall``), grading (``grade``, ``grading``) and generating exercises (``make_exercises``). What a
chapter page draws or prints is in :mod:`labsupport.pages`."""
