"""Classroom grading (``python -m labsupport grade``): the student's code is graded, never the
student's notebook's say-so.

* :mod:`.exercise` — chapters discovered from ``exercises/`` and ``labsupport/check/``; answer
  cells taken from a submission, the notebook rebuilt from the pristine exercise;
* :mod:`.sandbox` and :mod:`.worker` — the student's code in a bubblewrap sandbox (uid 65534, no
  capabilities, own namespaces, read-only file system but a size-limited private home);
* :mod:`.cgroup` — memory and process limits for the whole submission, where a cgroup can be made;
* :mod:`.memwatch` — where none can: the memory of all the submission's processes, added up by the grader;
* :mod:`.stubs` — the student's copy of ``labsupport``: check stubs, reference functions that raise;
* :mod:`.codec` — plain data (JSON, numpy bytes) across that boundary, never pickle;
* :mod:`.grader` — one submission: cells run there, checks run here, rows with reasons and flags;
* :mod:`.flags` and :mod:`.similarity` — what an honest answer never does; look-alike answers;
* :mod:`labsupport.workbook.grade` — the command: a class, two CSVs, feedback, executed notebooks.
"""
