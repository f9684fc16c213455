"""Admin of the annotations app: workers, assignments and answers in ``core``; crowd platforms in ``platforms``."""
from . import (
    core,  # noqa: F401
    platforms,  # noqa: F401
)
