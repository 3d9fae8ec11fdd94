from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Agent runs"

    def ready(self) -> None:
        from runs import conversations, services

        services.RUN_FINISH_HOOKS.append(conversations.conversation_on_run_finish)
