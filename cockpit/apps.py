from django.apps import AppConfig


class CockpitConfig(AppConfig):
    name = "cockpit"
    verbose_name = "Cockpit"
