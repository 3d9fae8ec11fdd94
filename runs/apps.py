from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Agent runs"

    def ready(self) -> None:
        from runs import conversations, inputs, selectors, services, worker
        from runs.tools import Policy

        services.RUN_FINISH_HOOKS.append(conversations.conversation_on_run_finish)
        worker.INTERRUPT_HANDLERS[Policy.CLARIFICATION] = inputs.clarification_interrupt
        selectors.PENDING_PROVIDERS.append(selectors.wait_pending)
