"""Entry point: ``python -m labsupport.preprocess`` (the command stays short; the code is
:mod:`labsupport.datasets.preprocess`)."""
from labsupport.datasets.preprocess import main

if __name__ == "__main__":
    raise SystemExit(main())
