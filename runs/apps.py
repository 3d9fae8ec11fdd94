from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Agent runs"

    def ready(self) -> None:
        # The runtime's own extensions, registered like a domain's: its graph nodes, the
        # clarification interrupt and what a conversation does when its run ends; and the
        # sweep of the shared cache's expired entries, which the maintenance backstop runs.
        from agentportal import counters
        from runs import conversations, extensions, inputs, nodes
        from runs.extensions import NodeKind
        from runs.models import Node

        extensions.node_register(NodeKind(Node.MODEL, nodes.model_step, calls_model=True))
        extensions.node_register(NodeKind(Node.TOOLS, nodes.tools_step))
        extensions.node_register(NodeKind(Node.FOLLOWUP, nodes.followup_step))
        extensions.interrupt_register(inputs.CLARIFICATION_INTERRUPT)
        extensions.run_end_register(conversations.conversation_on_run_finish)
        extensions.sweep_register(
            "conversations_start_waiting", conversations.conversations_start_waiting
        )
        extensions.sweep_register("cache_expired", counters.cache_expired_delete)
