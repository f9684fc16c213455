"""REST API of the annotations app: assignments and annotations (``/api/v1/``)."""
