"""Admin for participants, units, assignments, answers, attention checks and qualification tests."""
from django.contrib import admin  # noqa: F401
