from django.urls import path

from approvals import views

urlpatterns = [
    path("", views.portal_home, name="portal"),
    path("inbox/rows/", views.inbox_rows, name="portal-inbox-rows"),
    path("approvals/<str:interrupt_id>/", views.approval_page, name="portal-approval"),
    path("chat/", views.chat_page, name="portal-chat"),
    path("chat/messages/", views.chat_messages, name="portal-chat-messages"),
]
