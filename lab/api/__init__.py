"""The API toolkit every app's REST endpoints share, knowing no app: permissions, pagination,
throttling, parsing, filters, worker pseudonyms and streamed tabular exports.

``config/settings`` makes the classes here the ``REST_FRAMEWORK`` defaults, so a view gets them
without asking (and cannot be weaker by forgetting a mixin)."""
