from django.apps import AppConfig


class AgentPortalConfig(AppConfig):
    name = "agentportal"
    verbose_name = "Tenancy and access"
