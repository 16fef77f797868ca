"""Speed and memory measurements; each ``bench_<topic>.py`` writes ``results/<topic>.json``."""
