"""REST API of the scoring app: unit scores, score runs and per-source summaries (``/api/v1/``)."""
