from django.contrib import admin
from django.http import JsonResponse
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView


def healthz(request):
    return JsonResponse({"status": "ok"})


urlpatterns = [
    # The site's root is the researchers' way in (workers only ever open the links they are given).
    path("", RedirectView.as_view(pattern_name="admin:index", permanent=False, http_method_names=["get", "head"]),
         name="root"),
    path("admin/", admin.site.urls),
    path("healthz", healthz, name="healthz"),
    path("w/", include("annotations.urls")),
    path("api/v1/", include("config.api_urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="schema"), name="api-redoc"),
]

# A 400 page that never reads the request's form (Django's reads it again for its CSRF token).
handler400 = "lab.errors.bad_request"
