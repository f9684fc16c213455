"""Admin for crowd platforms: publications, provider calls (audit), bonuses."""
from django.contrib import admin  # noqa: F401
