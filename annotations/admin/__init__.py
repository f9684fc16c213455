"""Admin of the annotations app: workers, assignments and claims in ``core``; the answers list a
reviewer reads in ``answers``; flagged questions and explanations in ``flags``; crowd platforms in
``platforms``."""
from . import (
    answers,  # noqa: F401
    core,  # noqa: F401
    flags,  # noqa: F401
    platforms,  # noqa: F401
)
