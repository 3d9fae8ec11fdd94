from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"
    verbose_name = "After-sales and approvals"

    def ready(self) -> None:
        # The after-sales domain plugs into the generic runtime here: its graph versions and
        # its tools. `runs` never imports this app.
        from approvals import tools
        from runs.releases import GraphRelease, graph_release_register

        graph_release_register(GraphRelease(version="after-sales-v10"))
        tools.register()
