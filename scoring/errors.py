"""Domain errors of the scoring app: messages a user can act on, never a stack trace."""


class ScoringError(Exception):
    """Scoring cannot proceed; the message says why and what to do."""


class OutcomesImportError(ScoringError):
    """An outcomes file has bad rows; ``problems`` lists each as 'line N: field: reason'."""

    def __init__(self, message: str, problems: list[str] | None = None):
        self.problems = problems or []
        if self.problems:
            shown = "\n".join(self.problems[:20])
            more = f"\n... and {len(self.problems) - 20} more" if len(self.problems) > 20 else ""
            message = f"{message}\n{shown}{more}"
        super().__init__(message)
