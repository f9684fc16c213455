"""Admin of the annotations app: workers, assignments and claims in ``core``; the answers list a
reviewer reads in ``answers``; crowd platforms in ``platforms``."""
from . import (
    answers,  # noqa: F401
    core,  # noqa: F401
    platforms,  # noqa: F401
)
