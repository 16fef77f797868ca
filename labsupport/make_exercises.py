"""Entry point: ``python -m labsupport.make_exercises`` (the command stays short; the code is
:mod:`labsupport.workbook.make_exercises`)."""
from labsupport.workbook.make_exercises import main

if __name__ == "__main__":
    raise SystemExit(main())
