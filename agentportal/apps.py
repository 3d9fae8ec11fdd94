from django.apps import AppConfig


class AgentPortalConfig(AppConfig):
    name = "agentportal"
    verbose_name = "Tenancy and access"

    def ready(self) -> None:
        from agentportal import schema  # noqa: F401 (the OpenAPI auth extension)
