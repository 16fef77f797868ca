"""Entry point: ``python -m labsupport.preprocess`` (the command stays short; the code is
:mod:`labsupport.datasets.preprocess`, whose ``main`` documents the exit status)."""
import os
import sys

try:
    if os.environ.get("LABSUPPORT_FAULT") == "interrupt-import":   # tests: a Ctrl-C while importing
        raise KeyboardInterrupt
    from labsupport.datasets.preprocess import main
except KeyboardInterrupt:  # Ctrl-C while importing: one line, as main() does
    print("preprocess: interrupted (Ctrl-C)", file=sys.stderr)
    raise SystemExit(130) from None

if __name__ == "__main__":
    raise SystemExit(main())
