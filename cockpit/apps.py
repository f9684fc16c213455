from django.apps import AppConfig


class CockpitConfig(AppConfig):
    name = "cockpit"
    verbose_name = "Cockpit"

    def ready(self):
        from django.contrib import admin

        # The admin is the researcher's cockpit: it names the project, not the framework.
        admin.site.site_header = "Rationale Lab"
        admin.site.site_title = "Rationale Lab admin"
        admin.site.index_title = "Studies, work and results"
