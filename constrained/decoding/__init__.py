"""Clients of the matcher called by the backend or the engine: warm-up, completion search, jump-forward."""
