"""The compile path: a constraint to its grammar (``job``), run in worker processes or threads."""
