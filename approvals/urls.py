from django.urls import path, re_path

from approvals import absence_api, api, assignment_api, audit_api, backtest_api

urlpatterns = [
    path("runs/<uuid:run_id>/resume", api.RunResumeView.as_view(), name="run-resume"),
    path("approvals", api.ApprovalsView.as_view(), name="approvals"),
    path("approvals/<str:interrupt_id>", api.ApprovalDetailView.as_view(), name="approval"),
    path(
        "approvals/<str:interrupt_id>/assign",
        assignment_api.ApprovalAssignView.as_view(),
        name="approval-assign",
    ),
    path(
        "approvals/<str:interrupt_id>/decision",
        api.ApprovalDecisionView.as_view(),
        name="approval-decision",
    ),
    path("absences", absence_api.AbsencesView.as_view(), name="absences"),
    path("audit", audit_api.AuditView.as_view(), name="audit"),
    path("groups", assignment_api.ApproverGroupsView.as_view(), name="groups"),
    # A group's name, as its column holds it: 1 to 64 characters, no slash.
    re_path(
        r"^groups/(?P<name>[^/]{1,64})$",
        assignment_api.ApproverGroupDetailView.as_view(),
        name="group",
    ),
    path("absences/<int:absence_id>", absence_api.AbsenceDetailView.as_view(), name="absence"),
    path("policies", api.PoliciesView.as_view(), name="policies"),
    path("policies/<str:tool_name>", api.PolicyDetailView.as_view(), name="policy"),
    path(
        "policies/<str:tool_name>/simulate",
        backtest_api.PolicySimulateView.as_view(),
        name="policy-simulate",
    ),
    path("tickets", api.TicketsView.as_view(), name="tickets"),
    path("tickets/<uuid:ticket_id>", api.TicketDetailView.as_view(), name="ticket"),
    path(
        "tickets/<uuid:ticket_id>/confirm", api.TicketConfirmView.as_view(), name="ticket-confirm"
    ),
    path("tickets/<uuid:ticket_id>/revise", api.TicketReviseView.as_view(), name="ticket-revise"),
    path("tickets/<uuid:ticket_id>/decide", api.TicketDecideView.as_view(), name="ticket-decide"),
]
