"""The fault injector (issue #32) and the cases it runs."""
