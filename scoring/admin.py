"""Admin for scoring runs and the study report."""
from django.contrib import admin  # noqa: F401
