"""Entry point: ``python -m labsupport.make_exercises`` (the command stays short; the code is
:mod:`labsupport.workbook.make_exercises`, whose ``main`` documents the exit status)."""
import sys

try:
    from labsupport.workbook.make_exercises import main
except KeyboardInterrupt:  # Ctrl-C while importing: one line, as main() does
    print("make_exercises: interrupted (Ctrl-C)", file=sys.stderr)
    raise SystemExit(130) from None

if __name__ == "__main__":
    raise SystemExit(main())
