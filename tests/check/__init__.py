"""The exercise checks (labsupport.check): each chapter's questions, feedback tiers, hints, model answers."""
