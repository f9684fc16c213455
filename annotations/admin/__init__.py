"""Admin of the annotations app: workers, assignments and answers in ``core``; crowd platforms in ``providers``."""
from . import core  # noqa: F401
from . import providers  # noqa: F401
