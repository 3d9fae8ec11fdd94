"""The admin of who decides together: a shop's approver groups (its operators set them) and
who is away (shown here, set on the portal's Away page or over REST)."""

from django.contrib import admin
from django.contrib.auth.models import User

from agentportal.admin import MerchantScopedAdmin, OperatorScopedAdmin, ReadOnlyAdminMixin
from agentportal.models import Role
from approvals.models import ApproverGroup


class AbsenceAdmin(ReadOnlyAdminMixin, MerchantScopedAdmin):
    """Who is away from the shop and who stands in (set on the portal's Away page or over
    REST, through approvals.gate.delegation); shown here, written there."""

    list_display = ["user", "delegate", "starts_at", "ends_at", "merchant"]
    list_select_related = ["user", "delegate", "merchant"]
    list_filter = ["merchant"]
    date_hierarchy = "starts_at"


class ApproverGroupAdmin(OperatorScopedAdmin):
    """A shop's approver groups are its operators' to set; members are its supervisors."""

    list_display = ["name", "merchant", "member_names"]
    list_filter = ["merchant"]
    filter_horizontal = ["members"]

    @admin.display(description="Members")
    def member_names(self, group: ApproverGroup) -> str:
        return ", ".join(member.get_username() for member in group.members.all()) or None

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("members")

    def formfield_for_manytomany(self, db_field, request, **kwargs):
        if db_field.name == "members":
            # One filter call: the role and the shop are of the same membership.
            of_a_shop = {
                "memberships__role__in": [Role.SUPERVISOR, Role.OPERATOR],
                "memberships__active": True,
            }
            if not request.user.is_superuser:
                of_a_shop["memberships__merchant__in"] = self.shops_of(request.user)
            supervisors = User.objects.filter(**of_a_shop)
            kwargs["queryset"] = supervisors.distinct()
        return super().formfield_for_manytomany(db_field, request, **kwargs)
