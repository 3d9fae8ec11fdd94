from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"
    verbose_name = "After-sales and approvals"

    def ready(self) -> None:
        # The after-sales domain plugs into the generic runtime here; `runs` never imports
        # this app.
        from approvals import interrupts, plans
        from approvals.audit import chain
        from approvals.gate import escalation, services, timeline_sentences
        from approvals.gate.reviews import call_review_register
        from approvals.notify import outbox
        from approvals.shop import refund_review, script, tools
        from runs import extensions
        from runs.releases import GraphRelease, graph_release_register

        graph_release_register(
            GraphRelease(version="after-sales-v10", system_prompt=SYSTEM_PROMPT, default=True)
        )
        # The previous version: a proposal is created and the run completes with it, no wait.
        graph_release_register(
            GraphRelease(
                version="after-sales-v9",
                system_prompt=SYSTEM_PROMPT,
                switches={plans.PLANS_WAIT: False},
            )
        )
        extensions.interrupt_register(interrupts.APPROVAL_INTERRUPT)
        extensions.interrupt_register(interrupts.PLAN_INTERRUPT)
        tools.register()
        call_review_register(refund_review.REFUND_REVIEW)
        timeline_sentences.timeline_sentences_register()
        extensions.script_register(script.after_sales_script)
        extensions.sweep_register("approvals_expire_due", services.approvals_expire_due)
        extensions.sweep_register("approvals_escalate_due", escalation.approvals_escalate_due)
        extensions.sweep_register("plans_reconcile_due", plans.plans_reconcile_due)
        extensions.sweep_register("deliveries_wake", outbox.deliveries_wake)
        extensions.sweep_register("records_sealed", chain.records_seal_due)


SYSTEM_PROMPT = (
    "You are the after-sales assistant of an online shop. Help the customer with orders, "
    "refunds and exchanges. Use the tools; never promise what a tool did not confirm."
)
