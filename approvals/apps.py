from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"
    verbose_name = "After-sales and approvals"

    def ready(self) -> None:
        # The after-sales domain plugs into the generic runtime here: its graph versions and
        # its tools. `runs` never imports this app.
        from approvals import notifications, plans, services, tools
        from runs import selectors as run_selectors
        from runs import services as run_services
        from runs import worker
        from runs.releases import GraphRelease, graph_release_register
        from runs.tools import Policy

        graph_release_register(GraphRelease(version="after-sales-v10"))
        # The previous version: a proposal is created and the run completes with it, no wait.
        graph_release_register(GraphRelease(version="after-sales-v9", business_wait=False))
        tools.register()
        worker.INTERRUPT_HANDLERS[Policy.APPROVAL] = services.approval_interrupt
        worker.INTERRUPT_HANDLERS[Policy.BUSINESS_WAIT] = plans.plan_interrupt
        run_services.RUN_FINISH_HOOKS.append(services.approvals_on_run_finish)
        run_services.RUN_FINISH_HOOKS.append(plans.plans_on_run_finish)
        run_services.MAINTENANCE_HOOKS.append(services.approvals_expire_due)
        run_services.MAINTENANCE_HOOKS.append(plans.plans_reconcile_due)
        run_services.WAIT_EXPIRY_HOOKS.append(plans.plan_events_apply_locked)
        run_services.MAINTENANCE_HOOKS.append(notifications.webhooks_wake)
        run_selectors.PENDING_PROVIDERS.append(services.approval_pending)
