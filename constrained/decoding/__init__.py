"""The matcher's clients, called by the backend or the engine: warm-up, completions, jump-forward."""
