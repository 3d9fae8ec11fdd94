from django.contrib import admin

from agentportal.admin import MerchantScopedAdmin
from approvals.models import Order, StockLevel


@admin.register(Order)
class OrderAdmin(MerchantScopedAdmin):
    list_display = ["number", "merchant", "customer", "status", "total", "refunded"]
    list_filter = ["status"]
    search_fields = ["number", "customer__username"]


@admin.register(StockLevel)
class StockLevelAdmin(MerchantScopedAdmin):
    list_display = ["sku", "merchant", "quantity"]
    search_fields = ["sku"]
