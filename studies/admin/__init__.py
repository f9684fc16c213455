"""Admin of the studies app: core objects and imports in ``core``, LM generation in ``lm``."""
from . import core  # noqa: F401
from . import lm  # noqa: F401
