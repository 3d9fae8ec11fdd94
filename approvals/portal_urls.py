from django.urls import path

from approvals import views

urlpatterns = [
    path("", views.portal_home, name="portal"),
    path("inbox/rows/", views.inbox_rows, name="portal-inbox-rows"),
    path("inbox/plans/", views.inbox_plans, name="portal-inbox-plans"),
    path("approvals/<str:interrupt_id>/", views.approval_page, name="portal-approval"),
    path("tickets/<uuid:ticket_id>/", views.ticket_page, name="portal-ticket"),
    path("chat/", views.chat_page, name="portal-chat"),
    path("chat/messages/", views.chat_messages, name="portal-chat-messages"),
    path("requests/", views.customer_requests, name="portal-requests"),
]
