"""The workbook's tests, one folder per subject (CONTRIBUTING.md "Tests"); a package so that test
files of the same name in two folders do not clash and shared helpers import as ``tests.<group>.…``."""
