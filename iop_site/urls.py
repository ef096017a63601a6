"""URLs of the public listener: the admin UI (the OpenAI API and Node websocket sit beside it)."""

from django.contrib import admin
from django.urls import include, path

# The admin is the Edge's own UI, named after it; there is no public site for "View site". The
# lists get the whole width (the index and breadcrumbs lead everywhere the sidebar would).
admin.site.site_header = admin.site.site_title = "IOP Edge"
admin.site.site_url = None
admin.site.enable_nav_sidebar = False

urlpatterns = [
    # Before the admin's own URLs, whose catch-all would answer it with a 404.
    path("admin/dashboard/", include("edge.dashboard.urls")),
    path("admin/", admin.site.urls),
]
