from django.urls import path

from approvals.portal import (
    absence_views,
    approval_views,
    assignment_views,
    insight_views,
    link_views,
    live_views,
    plan_views,
    views,
)

urlpatterns = [
    path("", views.portal_home, name="portal"),
    path("inbox/rows/", views.inbox_rows, name="portal-inbox-rows"),
    path("inbox/plans/", views.inbox_plans, name="portal-inbox-plans"),
    path("inbox/live/", live_views.inbox_live, name="portal-inbox-live"),
    path("approvals/<str:interrupt_id>/", approval_views.approval_page, name="portal-approval"),
    path(
        "approvals/<str:interrupt_id>/live/", live_views.approval_live, name="portal-approval-live"
    ),
    path(
        "approvals/<str:interrupt_id>/claim/",
        assignment_views.approval_claim,
        name="portal-approval-claim",
    ),
    path("away/", absence_views.away_page, name="portal-away"),
    path("insights/", insight_views.insights_page, name="portal-insights"),
    path("away/<int:absence_id>/end/", absence_views.away_end, name="portal-away-end"),
    path("decide/", link_views.decision_link_confirm, name="portal-decision-confirm"),
    path("decide/<str:token>/", link_views.decision_link_page, name="portal-decision-link"),
    path("tickets/<uuid:ticket_id>/", views.ticket_page, name="portal-ticket"),
    path(
        "tickets/<uuid:ticket_id>/revise/",
        plan_views.ticket_revise_page,
        name="portal-ticket-revise",
    ),
    path("tickets/<uuid:ticket_id>/live/", live_views.ticket_live, name="portal-ticket-live"),
    path("chat/", views.chat_page, name="portal-chat"),
    path("chat/messages/", views.chat_messages, name="portal-chat-messages"),
    path("chat/live/", live_views.chat_live, name="portal-chat-live"),
    path("requests/", views.customer_requests, name="portal-requests"),
]
