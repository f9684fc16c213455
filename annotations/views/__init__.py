"""The worker pages: the task pages (``task``), the ways in (``entry``) and the researcher's preview (``preview``)."""
