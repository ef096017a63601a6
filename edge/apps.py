from django.apps import AppConfig


class EdgeAppConfig(AppConfig):
    """The Django app around the Edge's core: mirror models, usage, commands, admin."""

    name = "edge"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from edge import checks  # noqa: F401  (registers the system checks)
