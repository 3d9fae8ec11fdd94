from django import forms
from django.contrib import admin

from agentportal.models import ApiKey, Membership, Merchant
from agentportal.selectors import merchants_operated_by, merchants_supervised_by
from agentportal.webhooks import UnsafeWebhookUrl, webhook_url_check


def supervises_any(user) -> bool:
    return user.is_active and user.is_staff and merchants_supervised_by(user=user).exists()


class MerchantScopedAdmin(admin.ModelAdmin):
    """Supervisors see only their shops' rows, choices and filters; operators see all.

    Seeing needs a supervising membership, not a Django permission: access follows the
    membership, so revoking it ends access at once.
    """

    merchant_field = "merchant"

    def has_module_permission(self, request):
        return super().has_module_permission(request) or supervises_any(request.user)

    def has_view_permission(self, request, obj=None):
        return super().has_view_permission(request, obj) or supervises_any(request.user)

    def shops_of(self, user):
        """The shops whose rows `user` (not a superuser) sees here: the one scope of the
        list, the choices and the filters."""
        return merchants_supervised_by(user=user)

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        if request.user.is_superuser:
            return queryset
        return queryset.filter(**{f"{self.merchant_field}__in": self.shops_of(request.user)})

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "merchant" and not request.user.is_superuser:
            kwargs["queryset"] = self.shops_of(request.user)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


def operates_any(user) -> bool:
    return user.is_active and user.is_staff and merchants_operated_by(user=user).exists()


class OperatorScopedAdmin(MerchantScopedAdmin):
    """A shop's settings rather than its daily work: seen and changed by the shop's operators
    (and superusers) only. Supervisors of the shop do not see them, whatever Django
    permissions they hold: access follows the membership, as for MerchantScopedAdmin."""

    def _operates(self, request, obj=None) -> bool:
        user = request.user
        if user.is_superuser:
            return True
        if obj is None:
            return operates_any(user)
        return merchants_operated_by(user=user).filter(pk=obj.merchant_id).exists()

    def has_module_permission(self, request):
        return self._operates(request)

    def has_view_permission(self, request, obj=None):
        return self._operates(request, obj)

    def has_add_permission(self, request):
        return self._operates(request)

    def has_change_permission(self, request, obj=None):
        return self._operates(request, obj)

    def shops_of(self, user):
        return merchants_operated_by(user=user)


class ReadOnlyAdminMixin:
    """Records written only by services: shown, never edited by hand."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class HistoryInline(ReadOnlyAdminMixin, admin.TabularInline):
    """A record's history under it (a run's timeline, a ticket's proposals), written only by
    services; whoever sees the record (a supervising membership) sees its history."""

    extra = 0
    can_delete = False

    def has_view_permission(self, request, obj=None):
        return super().has_view_permission(request, obj) or supervises_any(request.user)


class MerchantForm(forms.ModelForm):
    webhook_url = forms.URLField(required=False, assume_scheme="https")

    class Meta:
        model = Merchant
        fields = [
            "slug",
            "name",
            "active",
            "max_running_runs",
            "reserved_slots",
            "webhook_url",
            "webhook_secret",
        ]

    def clean_webhook_url(self):
        url = self.cleaned_data["webhook_url"]
        if url:
            try:
                webhook_url_check(url)
            except UnsafeWebhookUrl as error:
                raise forms.ValidationError(str(error)) from error
        return url

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("webhook_url") and len(cleaned.get("webhook_secret") or "") < 16:
            self.add_error(
                "webhook_secret", "A webhook needs a secret of 16 characters or more to sign with."
            )
        return cleaned


@admin.register(Merchant)
class MerchantAdmin(admin.ModelAdmin):
    form = MerchantForm
    list_display = ["slug", "name", "active", "max_running_runs", "reserved_slots"]
    search_fields = ["slug", "name"]

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        if request.user.is_superuser:
            return queryset
        return queryset.filter(pk__in=merchants_supervised_by(user=request.user))


@admin.register(Membership)
class MembershipAdmin(MerchantScopedAdmin):
    list_display = ["user", "merchant", "role", "active", "revoked_at"]
    list_filter = ["role", "active"]
    search_fields = ["user__username", "merchant__slug"]


@admin.register(ApiKey)
class ApiKeyAdmin(ReadOnlyAdminMixin, MerchantScopedAdmin):
    list_display = ["prefix", "merchant", "user", "role", "created_at", "revoked_at"]
    list_filter = ["role"]
    exclude = ["key_hash"]
