from datetime import UTC

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from pydantic import ValidationError

from agentportal.admin import HistoryInline, MerchantScopedAdmin, ReadOnlyAdminMixin
from agentportal.errors import DomainError
from agentportal.selectors import merchants_operated_by
from runs.models import AgentRelease, AgentRun, ModelAttempt, RunEvent, ToolExecution
from runs.releases import GRAPH_RELEASES, ReleaseManifest
from runs.services import release_save, run_cancel, run_parked_fail, run_unpark
from runs.timeline import event_sentence


class RunEventInline(HistoryInline):
    model = RunEvent
    fields = ["seq", "at", "what_happened", "type", "data"]
    readonly_fields = fields
    ordering = ["seq"]
    verbose_name_plural = "timeline"

    @admin.display(description="at (UTC)")
    def at(self, event: RunEvent) -> str:
        return event.created_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")

    @admin.display(description="what happened")
    def what_happened(self, event: RunEvent) -> str:
        return event_sentence(event)


class ModelAttemptInline(HistoryInline):
    model = ModelAttempt
    fields = ["step", "attempt", "status", "usage", "latency_ms", "error"]
    readonly_fields = fields


class ToolExecutionInline(HistoryInline):
    model = ToolExecution
    fields = ["step", "index", "tool", "args", "status", "result"]
    readonly_fields = fields


def _operated(model_admin, request, queryset):
    """The selected runs in shops where the user is an operator; the others are named and
    left alone (supervising a shop does not make its parked runs yours to repair)."""
    operated = queryset.filter(merchant__in=merchants_operated_by(user=request.user))
    for run in queryset.exclude(pk__in=operated.values("pk")):
        model_admin.message_user(
            request, f"Run {run.pk}: only its shop's operators repair it.", messages.WARNING
        )
    return operated


# What names a run and where it stands: the list's first columns and the page's first fields.
RUN_HEADLINE = ["id", "merchant", "account", "status", "next_node", "step"]


@admin.register(AgentRun)
class AgentRunAdmin(ReadOnlyAdminMixin, MerchantScopedAdmin):
    list_display = [*RUN_HEADLINE, "error_detail", "created_at"]
    list_filter = ["status", "graph_version", "merchant"]
    search_fields = ["id", "account__username", "idempotency_key"]
    actions = ["cancel_selected", "unpark_selected", "fail_parked_selected"]
    list_select_related = ["merchant", "account"]
    date_hierarchy = "created_at"
    inlines = [RunEventInline, ModelAttemptInline, ToolExecutionInline]
    readonly_fields = [
        *RUN_HEADLINE,
        "version",
        "graph_version",
        "result",
        "error_code",
        "error_detail",
        "model_calls",
        "deadline_at",
        "lease_token",
        "lease_expires_at",
        "control_version",
        "messages",
        "state_snapshot",
        "wait_state",
        "wait_deadline_at",
        "domain_event_cursor",
        "release_snapshot",
        "created_at",
        "updated_at",
        "finished_at",
    ]
    fields = readonly_fields

    def get_list_filter(self, request):
        if request.user.is_superuser:
            return self.list_filter
        return ["status", "graph_version"]

    @admin.action(description="Cancel the selected runs")
    def cancel_selected(self, request, queryset):
        for run in queryset:
            try:
                staff = settings.AGENTPORTAL["STAFF_DISPLAY_NAME"]
                run_cancel(run=run, reason=f"cancelled by {staff}")
            except DomainError as refusal:
                self.message_user(request, f"Run {run.pk}: {refusal.detail}", messages.WARNING)
            else:
                self.message_user(request, f"Run {run.pk}: cancelled.")

    def has_unpark_permission(self, request) -> bool:
        """Operators (and superusers) repair what a worker could not make sense of."""
        return merchants_operated_by(user=request.user).exists()

    @admin.action(
        description="Hand the selected parked runs back to the queue", permissions=["unpark"]
    )
    def unpark_selected(self, request, queryset):
        for run in _operated(self, request, queryset):
            if run_unpark(run_id=run.pk):
                self.message_user(request, f"Run {run.pk}: back in the queue.")
            else:
                self.message_user(request, f"Run {run.pk}: not parked.", messages.WARNING)

    @admin.action(
        description="Fail the selected parked runs (INTERNAL_ERROR)", permissions=["unpark"]
    )
    def fail_parked_selected(self, request, queryset):
        who = request.user.get_username()
        for run in _operated(self, request, queryset):
            if run_parked_fail(run_id=run.pk, detail=f"An operator ({who}) failed it."):
                self.message_user(request, f"Run {run.pk}: failed.")
            else:
                self.message_user(request, f"Run {run.pk}: not parked.", messages.WARNING)


class AgentReleaseForm(forms.ModelForm):
    class Meta:
        model = AgentRelease
        fields = ["merchant", "version", "graph_version", "manifest", "published"]

    def clean_graph_version(self):
        version = self.cleaned_data["graph_version"]
        if version not in GRAPH_RELEASES:
            raise forms.ValidationError(
                f"Not a graph version of this build: {', '.join(sorted(GRAPH_RELEASES))}."
            )
        return version

    def clean_manifest(self):
        try:
            return ReleaseManifest.model_validate(self.cleaned_data["manifest"]).model_dump()
        except ValidationError as error:
            raise forms.ValidationError(str(error)) from error


@admin.register(AgentRelease)
class AgentReleaseAdmin(MerchantScopedAdmin):
    form = AgentReleaseForm
    list_display = ["merchant", "version", "graph_version", "published", "created_at"]
    list_filter = ["published", "graph_version"]

    def save_model(self, request, obj, form, change):
        release_save(release=obj)
