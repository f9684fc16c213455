"""Admin for LM generation: generators, jobs, failures and Gen-U predictions."""
from django.contrib import admin  # noqa: F401
