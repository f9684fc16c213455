"""REST API of the studies app (``/api/v1/``) and what every app's API shares (``common``,
``streaming``, ``tokens``)."""
