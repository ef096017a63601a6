from django.apps import AppConfig


class EdgeConfig(AppConfig):
    name = "edge"
    default_auto_field = "django.db.models.BigAutoField"
