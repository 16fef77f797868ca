"""Entry point: ``python -m labsupport.grade`` (the command stays short; the code is
:mod:`labsupport.workbook.grade`)."""
from labsupport.workbook.grade import main

if __name__ == "__main__":
    raise SystemExit(main())
