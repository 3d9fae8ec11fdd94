from django.urls import path

from approvals import api

urlpatterns = [
    path("runs/<uuid:run_id>/resume", api.RunResumeView.as_view(), name="run-resume"),
    path("approvals", api.ApprovalsView.as_view(), name="approvals"),
    path("approvals/<str:interrupt_id>", api.ApprovalDetailView.as_view(), name="approval"),
    path(
        "approvals/<str:interrupt_id>/decision",
        api.ApprovalDecisionView.as_view(),
        name="approval-decision",
    ),
]
