"""Admin of the studies app: core objects and imports in ``core``, LM generation in ``lm``,
API tokens in ``access``, user accounts (refused while a study, call or bonus keeps them) in ``users``."""
from . import (
    access,  # noqa: F401
    core,  # noqa: F401
    lm,  # noqa: F401
    users,  # noqa: F401
)
