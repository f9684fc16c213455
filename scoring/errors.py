"""Domain errors of the scoring app: messages a user can act on, never a stack trace."""


class ScoringError(Exception):
    """Scoring cannot proceed; the message says why and what to do."""
