"""Entry point: ``python -m labsupport.runall`` (the command stays short; the code is
:mod:`labsupport.workbook.runall`)."""
from labsupport.workbook.runall import main

if __name__ == "__main__":
    raise SystemExit(main())
