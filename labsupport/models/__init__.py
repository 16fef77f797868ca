"""Small models the chapters train or probe (chapter 4's contamination proof, chapter 6's run)."""
