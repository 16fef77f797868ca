"""Entry point: ``python -m labsupport.runall`` (the command stays short; the code is
:mod:`labsupport.workbook.runall`, whose ``main`` documents the exit status)."""
import sys

try:
    from labsupport.workbook.runall import main
except KeyboardInterrupt:  # Ctrl-C while importing: one line, as main() does
    print("runall: interrupted (Ctrl-C)", file=sys.stderr)
    raise SystemExit(130) from None

if __name__ == "__main__":
    raise SystemExit(main())
