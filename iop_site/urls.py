"""URLs of the public listener: the admin UI (the OpenAI API and Node websocket sit beside it)."""

from django.contrib import admin
from django.urls import path

urlpatterns = [
    path("admin/", admin.site.urls),
]
