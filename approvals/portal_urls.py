from django.urls import path

from approvals import views

urlpatterns = [
    path("", views.portal_home, name="portal"),
    path("inbox/rows/", views.inbox_rows, name="portal-inbox-rows"),
    path("approvals/<str:interrupt_id>/", views.approval_page, name="portal-approval"),
]
