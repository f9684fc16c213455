"""Admin of the annotations app: workers, assignments and answers in ``core``; crowd platforms in ``providers``."""
from . import (
    core,  # noqa: F401
    providers,  # noqa: F401
)
