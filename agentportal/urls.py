from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from agentportal import monitoring, views
from agentportal.forms import ThrottledAdminAuthenticationForm, ThrottledAuthenticationForm

admin.site.login_form = ThrottledAdminAuthenticationForm
admin.site.site_header = "Agent Portal administration"
admin.site.site_title = "Agent Portal"

urlpatterns = [
    path("", RedirectView.as_view(url="/portal/", permanent=False)),
    path("portal/", include("approvals.portal.urls")),
    path("healthz", views.healthz, name="healthz"),
    path("metrics", monitoring.metrics, name="metrics"),
    path("admin/", admin.site.urls),
    path(
        "accounts/login/",
        auth_views.LoginView.as_view(authentication_form=ThrottledAuthenticationForm),
        name="login",
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/v1/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/v1/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("api/v1/", include("runs.urls")),
    path("api/v1/", include("approvals.urls")),
]

handler404 = "agentportal.views.not_found"
handler500 = "agentportal.views.server_error"
