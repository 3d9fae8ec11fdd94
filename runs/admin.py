from django import forms
from django.contrib import admin
from pydantic import ValidationError

from agentportal.admin import MerchantScopedAdmin, ReadOnlyAdminMixin
from runs.models import AgentRelease, AgentRun, ModelAttempt, RunEvent, ToolExecution
from runs.releases import GRAPH_RELEASES, ReleaseManifest
from runs.services import release_save


class RunEventInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = RunEvent
    fields = ["seq", "type", "data", "created_at"]
    readonly_fields = fields
    extra = 0
    ordering = ["seq"]
    verbose_name_plural = "timeline"


class ModelAttemptInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = ModelAttempt
    fields = ["step", "attempt", "status", "usage", "latency_ms", "error"]
    readonly_fields = fields
    extra = 0


class ToolExecutionInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = ToolExecution
    fields = ["step", "index", "tool", "args", "status", "result"]
    readonly_fields = fields
    extra = 0


@admin.register(AgentRun)
class AgentRunAdmin(ReadOnlyAdminMixin, MerchantScopedAdmin):
    list_display = ["id", "merchant", "account", "status", "next_node", "step", "created_at"]
    list_filter = ["status", "graph_version", "merchant"]
    search_fields = ["id", "account__username", "idempotency_key"]
    list_select_related = ["merchant", "account"]
    date_hierarchy = "created_at"
    inlines = [RunEventInline, ModelAttemptInline, ToolExecutionInline]
    readonly_fields = [
        "id",
        "merchant",
        "account",
        "status",
        "next_node",
        "step",
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
