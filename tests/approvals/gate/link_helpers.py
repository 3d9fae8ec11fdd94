"""Following an email's decision links, as the decision-link and band tests do."""

import re

from django.test import Client

from approvals.models import Approval, Delivery, Transport

LINK = re.compile(r"^(Approve[^:]*|Reject): \S+/portal/decide/([^/\s]+)/$", re.MULTILINE)


def links_in_email(approval: Approval, username: str) -> dict[str, str]:
    """{"approve": token, "reject": token} from the email `username` was sent about the call."""
    [email] = [
        email
        for email in Delivery.objects.filter(
            transport=Transport.EMAIL,
            event="approval.requested",
            recipient=f"{username}@example.com",
        )
        if approval.interrupt_id in email.payload["body"]
    ]
    return {
        ("reject" if label == "Reject" else "approve"): token
        for label, token in LINK.findall(email.payload["body"])
    }


def follow(token: str):
    return Client().get(f"/portal/decide/{token}/")


def confirm(token: str, reason: str = ""):
    return Client().post("/portal/decide/", {"token": token, "reason": reason})
