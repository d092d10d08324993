"""One adapter package per coding agent; each turns its agent's seams into the same daemon calls."""
