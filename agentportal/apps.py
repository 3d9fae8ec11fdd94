from django.apps import AppConfig


class AgentPortalConfig(AppConfig):
    name = "agentportal"
    verbose_name = "Tenancy and access"

    def ready(self) -> None:
        from agentportal import counters, schema  # noqa: F401 (schema: the OpenAPI auth extension)
        from runs import extensions

        extensions.sweep_register("cache_expired", counters.cache_expired_delete)
