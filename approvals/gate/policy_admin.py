"""The admin of a shop's approval policies: its operators edit the rules of a tool's policy as
fields; each save that changes one writes a new version through `policy_update`, and the
versions before it are listed, never edited."""

from datetime import UTC, timedelta

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from agentportal.admin import OperatorScopedAdmin
from agentportal.errors import InvalidInput
from approvals import selectors
from approvals.gate.backtest import policy_backtest
from approvals.gate.bands import bands_from_json, bands_parse, bands_text
from approvals.gate.policies import (
    MAX_SECONDS,
    RULE_FIELDS,
    PolicyRules,
    policy_rules_check,
    policy_tool_names,
    policy_update,
)
from approvals.models import ApprovalPolicy, ApprovalPolicyVersion


class ApprovalPolicyForm(forms.ModelForm):
    """The policy's rules as fields, filled from its current version; the rules are checked
    together by the policy's own check, whose refusals are this form's errors."""

    amount_field = forms.CharField(
        max_length=64,
        initial="amount",
        help_text="The argument of the tool's calls the amounts below compare with.",
    )
    auto_approve_up_to = forms.DecimalField(
        max_digits=10,
        decimal_places=2,
        required=False,
        help_text="Calls up to this amount are approved by the policy, by nobody. Blank: never.",
    )
    two_approvers_from = forms.DecimalField(
        max_digits=10,
        decimal_places=2,
        required=False,
        help_text="Calls from this amount need two different people. Blank: never. "
        "The shorthand of the band '2 from <amount>': give it or the bands below.",
    )
    approver_bands = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 40}),
        help_text="One band a line: '2 of Finance from 200.00' (two members of the Finance "
        "group for calls from 200.00), '1 of Support' (every amount), '2 from 500.00' (any two "
        "supervisors). A call falls in the band with the highest amount at or below its own; "
        "below every band it needs one supervisor. Blank: no bands.",
    )
    escalate_after_seconds = forms.IntegerField(
        required=False,
        max_value=MAX_SECONDS,
        help_text="A call still undecided this many seconds after it came is escalated. "
        "Blank: never.",
    )
    escalate_to_operators = forms.BooleanField(
        required=False, initial=True, help_text="Escalations go to the shop's operators."
    )
    escalate_to_email = forms.EmailField(
        required=False, max_length=254, help_text="And to this address, if one is given."
    )

    class Meta:
        model = ApprovalPolicy
        fields = ["merchant", "tool_name"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "tool_name" in self.fields:
            self.fields["tool_name"] = forms.ChoiceField(
                choices=[(name, name) for name in policy_tool_names()],
                help_text="A tool whose calls wait for approval.",
            )
        current = self.instance.current if self.instance.pk else None
        if current is not None:
            for name in RULE_FIELDS:
                self.initial.setdefault(name, getattr(current, name))
            if current.two_approvers_from is None:
                self.initial["approver_bands"] = bands_text(bands_from_json(current.approver_bands))
            else:
                self.initial["approver_bands"] = ""

    def clean_approver_bands(self):
        try:
            return bands_parse(self.cleaned_data.get("approver_bands") or "")
        except ValueError as error:
            raise forms.ValidationError(str(error)) from None

    def clean(self):
        cleaned = super().clean()
        self.rules = None
        if self.errors:
            return cleaned
        rules = PolicyRules(**{name: cleaned.get(name) for name in RULE_FIELDS})
        try:
            policy_rules_check(
                merchant=cleaned.get("merchant", getattr(self.instance, "merchant", None)),
                tool_name=cleaned.get("tool_name", self.instance.tool_name),
                rules=rules,
            )
        except InvalidInput as refusal:
            for error in refusal.errors or [{"field": "", "message": refusal.detail}]:
                field = error["field"] if error["field"] in self.fields else None
                self.add_error(field, error["message"])
        else:
            self.rules = rules
        return cleaned


def _amount(value) -> str:
    return "-" if value is None else str(value)


def _bands(version: ApprovalPolicyVersion) -> str:
    """`2 of Finance from 200.00; 1 of Support`, or "one supervisor"."""
    return bands_text(bands_from_json(version.approver_bands)).replace("\n", "; ") or (
        "one supervisor"
    )


def _seconds(value) -> str:
    return "-" if value is None else f"{value} s"


def _escalated_to(version: ApprovalPolicyVersion) -> str:
    if version.escalate_after_seconds is None:
        return "-"
    whom = (["operators"] if version.escalate_to_operators else []) + (
        [version.escalate_to_email] if version.escalate_to_email else []
    )
    return ", ".join(whom) or "nobody"


class ApprovalPolicyAdmin(OperatorScopedAdmin):
    form = ApprovalPolicyForm
    list_display = [
        "tool_name",
        "merchant",
        "version",
        "amount_field",
        "auto_approve_up_to",
        "approvers",
        "escalate_after",
        "escalate_to",
        "updated",
    ]
    list_select_related = ["merchant", "current"]
    search_fields = ["tool_name"]

    def get_list_filter(self, request):
        return ["merchant"] if request.user.is_superuser else []

    def get_fields(self, request, obj=None):
        if obj is None:
            return ["merchant", "tool_name", *RULE_FIELDS]
        return ["merchant", "tool_name", "version", *RULE_FIELDS, "try_link", "versions"]

    def get_readonly_fields(self, request, obj=None):
        return [] if obj is None else ["merchant", "tool_name", "version", "try_link", "versions"]

    def has_delete_permission(self, request, obj=None):
        # Calls keep the version they were created under; a policy is turned off by blanking
        # its rules, in a new version.
        return False

    @admin.display(description="version")
    def version(self, policy: ApprovalPolicy):
        return policy.current.version if policy.current else "-"

    @admin.display(description="amount field")
    def amount_field(self, policy: ApprovalPolicy):
        return policy.current.amount_field if policy.current else "-"

    @admin.display(description="approved by the policy up to")
    def auto_approve_up_to(self, policy: ApprovalPolicy):
        return _amount(policy.current.auto_approve_up_to) if policy.current else "-"

    @admin.display(description="approvers")
    def approvers(self, policy: ApprovalPolicy):
        return _bands(policy.current) if policy.current else "-"

    @admin.display(description="escalate after")
    def escalate_after(self, policy: ApprovalPolicy):
        return _seconds(policy.current.escalate_after_seconds) if policy.current else "-"

    @admin.display(description="escalate to")
    def escalate_to(self, policy: ApprovalPolicy):
        return _escalated_to(policy.current) if policy.current else "-"

    @admin.display(description="updated (UTC)")
    def updated(self, policy: ApprovalPolicy):
        if policy.current is None:
            return "-"
        return policy.current.created_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")

    @admin.display(description="versions")
    def versions(self, policy: ApprovalPolicy):
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
            "<td>{}</td><td>{}</td></tr>",
            (
                (
                    version.version,
                    version.amount_field,
                    _amount(version.auto_approve_up_to),
                    _bands(version),
                    _seconds(version.escalate_after_seconds),
                    _escalated_to(version),
                    version.created_by.get_username() if version.created_by else "service key",
                    version.created_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S"),
                )
                for version in selectors.policy_versions(policy)
            ),
        )
        return format_html(
            "<table><thead><tr><th>version</th><th>amount field</th>"
            "<th>approved by the policy up to</th><th>approvers</th>"
            "<th>escalate after</th><th>escalate to</th><th>by</th><th>at (UTC)</th>"
            "</tr></thead><tbody>{}</tbody></table>",
            rows,
        )

    def save_model(self, request, obj, form, change):
        """Through the policy's one writer: a new version when a rule changed, none
        otherwise; `obj` becomes the policy as saved."""
        before = obj.current_id if change else None
        policy = policy_update(
            merchant=obj.merchant, tool_name=obj.tool_name, rules=form.rules, user=request.user
        )
        for name in ("id", "current_id", "created_at", "updated_at"):
            setattr(obj, name, getattr(policy, name))
        obj.current = policy.current
        obj._state.adding = False
        obj._state.db = policy._state.db
        obj.version_written = policy.current_id != before

    def response_change(self, request, obj):
        if not getattr(obj, "version_written", True):
            self.message_user(
                request,
                f"No rule changed: version {obj.current.version} is still the current one.",
                messages.INFO,
            )
        else:
            self.message_user(request, f"Version {obj.current.version} written.")
        return super().response_change(request, obj)

    def get_urls(self):
        return [
            path(
                "<int:policy_id>/try/",
                self.admin_site.admin_view(self.try_view),
                name="approvals_approvalpolicy_try",
            ),
            *super().get_urls(),
        ]

    @admin.display(description="Before saving")
    def try_link(self, policy: ApprovalPolicy):
        url = reverse("admin:approvals_approvalpolicy_try", args=[policy.pk])
        return format_html('<a href="{}">Try other rules on the last 30 days\' calls</a>', url)

    def try_view(self, request, policy_id):
        """Rules tried on the shop's calls of the last 30 days, written nowhere."""
        policy = get_object_or_404(self.get_queryset(request), pk=policy_id)
        if not self._operates(request, policy):
            raise PermissionDenied
        # The change page's form: the shop and the tool are the policy's, not fields.
        form = self.get_form(request, policy, change=True)(request.POST or None, instance=policy)
        result = None
        if request.method == "POST" and form.is_valid():
            now = timezone.now()
            result = policy_backtest(
                merchant=policy.merchant,
                tool_name=policy.tool_name,
                rules=form.rules,
                since=now - timedelta(days=30),
                until=now,
            )
        context = {
            **self.admin_site.each_context(request),
            "title": f"Try rules for {policy.tool_name} in {policy.merchant}",
            "opts": self.model._meta,
            "policy": policy,
            "form": form,
            "result": result,
        }
        return TemplateResponse(request, "admin/approvals/approvalpolicy/try.html", context)
