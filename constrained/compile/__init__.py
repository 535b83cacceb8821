"""The compile path: a constraint kind to its grammar (job), the worker processes and threads that run it, and their slots."""
