"""Worker URLs, mounted under ``/w/`` by ``config/urls.py``."""
from django.urls import path

from annotations.views import entry as views_entry
from annotations.views import preview as views_preview
from annotations.views import task as views

app_name = "annotations"

urlpatterns = [
    path("s/<str:study_token>/", views_entry.entry, name="entry"),
    path("l/<str:token>/", views_entry.participant_link_entry, name="link_entry"),
    path("o/<str:token>/", views_entry.open_link_entry, name="open_link_entry"),
    path("a/<str:token>/", views.assignment_view, name="assignment"),
    path("a/<str:token>/consent", views.consent_view, name="consent"),
    path("a/<str:token>/qualification", views.qualification_view, name="qualification"),
    path("a/<str:token>/answer", views.answer_view, name="answer"),
    path("a/<str:token>/submit", views.submit_view, name="submit"),
    path("a/<str:token>/leave", views.leave_view, name="leave"),
    path("preview/<int:study_id>/", views_preview.preview_view, name="preview"),
]
