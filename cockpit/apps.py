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

        # The publish page lives in annotations, which may not import scoring: the cockpit hands it
        # the study planner's panel ("How precise will this study be?").
        from annotations.admin.platforms import PUBLISH_PAGE_PANELS
        from cockpit.precision import publish_panel

        if publish_panel not in PUBLISH_PAGE_PANELS:
            PUBLISH_PAGE_PANELS.append(publish_panel)
