from django.apps import AppConfig


class RefreshConfig(AppConfig):
    name = "refresh"
    default_auto_field = "django.db.models.BigAutoField"
