"""The error of LM jobs, below every other module of the package so each can raise it."""


class GenerationError(Exception):
    """A job that cannot be created or run as asked; the message says what to change."""
