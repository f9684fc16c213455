"""Admin for datasets, items, sources, rationales, generalization questions, studies and imports."""
from django.contrib import admin  # noqa: F401
