"""Admin of the studies app: core objects and imports in ``core``, LM generation in ``lm``,
API tokens in ``access``."""
from . import access  # noqa: F401
from . import core  # noqa: F401
from . import lm  # noqa: F401
