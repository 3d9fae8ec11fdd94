"""REST for supervisors' absences from a shop (approvals.gate.delegation): list, set and end
them. A person's key acts for its person; a service key for any supervisor of its shop."""

from django.contrib.auth.models import User
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from agentportal.problems import Problem
from agentportal.selectors import principal_for_user
from approvals.api import supervisor_or_403
from approvals.gate import delegation
from approvals.models import Absence
from approvals.serializers import (
    AbsenceListSerializer,
    AbsenceRequestSerializer,
    AbsenceSerializer,
)


def _absences_of(principal):
    """The absences a principal may see and end: their own, or the shop's for a service key."""
    absences = Absence.objects.filter(merchant=principal.merchant).select_related(
        "user", "delegate"
    )
    return absences if principal.is_service else absences.filter(user=principal.user)


def _person(principal, username: str | None, field: str) -> User:
    if username is None:
        if principal.user is None:
            raise Problem(
                400,
                "validation_error",
                "A service key names whose absence it is.",
                errors=[{"field": field, "message": "Name the supervisor who is away."}],
            )
        return principal.user
    if not principal.is_service and username != principal.user.get_username():
        raise Problem(403, "permission_denied", "Supervisors set their own absences.")
    user = User.objects.filter(username=username).first()
    principal_there = user and principal_for_user(user=user, merchant=principal.merchant)
    if not principal_there or not principal_there.can_supervise:
        raise Problem(
            400,
            "validation_error",
            f"No supervisor {username!r} in this shop.",
            errors=[{"field": field, "message": "No such supervisor in this shop."}],
        )
    return user


class AbsencesView(APIView):
    @extend_schema(operation_id="absences_list", responses=AbsenceListSerializer)
    def get(self, request):
        principal = supervisor_or_403(request)
        absences = _absences_of(principal).filter(ends_at__gt=timezone.now())
        return Response(
            {"results": AbsenceSerializer(absences.order_by("starts_at", "pk"), many=True).data}
        )

    @extend_schema(
        operation_id="absences_create",
        request=AbsenceRequestSerializer,
        responses={201: AbsenceSerializer},
    )
    def post(self, request):
        principal = supervisor_or_403(request)
        body = AbsenceRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        user = _person(principal, data.get("user"), "user")
        delegate = User.objects.filter(username=data["delegate"]).first()
        absence = delegation.absence_set(
            merchant=principal.merchant,
            user=user,
            delegate=delegate,
            starts_at=data.get("starts_at") or timezone.now(),
            ends_at=data["ends_at"],
        )
        return Response(AbsenceSerializer(absence).data, status=201)


class AbsenceDetailView(APIView):
    @extend_schema(operation_id="absences_end", responses={204: None})
    def delete(self, request, absence_id: int):
        # Who may first, then which: a customer's answer says nothing of which absences exist.
        principal = supervisor_or_403(request)
        absence = _absences_of(principal).filter(pk=absence_id).first()
        if absence is None:
            raise Problem(404, "not_found", "No such absence of yours.")
        delegation.absence_end(absence=absence)
        return Response(status=204)
