"""Grading a class (python -m labsupport grade), the adversarial class, exercises generated from solutions."""
