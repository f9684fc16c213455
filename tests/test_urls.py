"""The project's own URLs (config/urls.py)."""
from django.test import Client


def test_the_root_opens_the_admin_where_a_researcher_logs_in():
    # Before, http://127.0.0.1:8000/ (what a researcher types after scripts/demo.sh) was a 404.
    response = Client().get("/", follow=True)
    assert [url for url, _status in response.redirect_chain] == ["/admin/", "/admin/login/?next=/admin/"]
    assert response.status_code == 200
