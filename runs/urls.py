from django.urls import path

from runs import api, conversation_api

urlpatterns = [
    path("runs", api.RunsView.as_view(), name="runs"),
    path("runs/<uuid:run_id>", api.RunDetailView.as_view(), name="run-detail"),
    path("runs/<uuid:run_id>/events", api.RunEventsView.as_view(), name="run-events"),
    path("runs/<uuid:run_id>/events/stream", api.RunEventStreamView.as_view(), name="run-stream"),
    path("runs/<uuid:run_id>/cancel", api.RunCancelView.as_view(), name="run-cancel"),
    path("runs/<uuid:run_id>/inputs", api.RunInputsView.as_view(), name="run-inputs"),
    path(
        "runs/<uuid:run_id>/receipts/<path:idempotency_key>",
        api.RunReceiptView.as_view(),
        name="run-receipt",
    ),
    path("conversations", conversation_api.ConversationsView.as_view(), name="conversations"),
    path(
        "conversations/<uuid:conversation_id>",
        conversation_api.ConversationDetailView.as_view(),
        name="conversation",
    ),
    path(
        "conversations/<uuid:conversation_id>/messages",
        conversation_api.ConversationMessagesView.as_view(),
        name="conversation-messages",
    ),
]
