"""The after-sales app's data, one module per concern; every model is registered here, where
Django looks for an app's models."""

from approvals.models.audit import ActorKind, DecisionRecord, RecordChain, RecordKind
from approvals.models.gate import (
    Approval,
    ApprovalPolicy,
    ApprovalPolicyVersion,
    ApprovalStatus,
    ApprovalVote,
    CancelCause,
    Decision,
    DecisionLink,
    args_digest,
)
from approvals.models.outbox import (
    Delivery,
    DeliveryStatus,
    Transport,
)
from approvals.models.plans import (
    TICKET_OPEN_STATUSES,
    BusinessEvent,
    BusinessEventKind,
    Confirmation,
    PlanDecision,
    PlanReview,
    Proposal,
    Ticket,
    TicketStatus,
)
from approvals.models.shop import (
    FollowupRequest,
    Order,
    OrderStatus,
    Refund,
    StockLevel,
)
from approvals.models.teams import Absence, ApproverGroup

__all__ = [
    "TICKET_OPEN_STATUSES",
    "Absence",
    "ActorKind",
    "Approval",
    "ApprovalPolicy",
    "ApprovalPolicyVersion",
    "ApprovalStatus",
    "ApprovalVote",
    "ApproverGroup",
    "BusinessEvent",
    "BusinessEventKind",
    "CancelCause",
    "Confirmation",
    "Decision",
    "DecisionLink",
    "DecisionRecord",
    "Delivery",
    "DeliveryStatus",
    "FollowupRequest",
    "Order",
    "OrderStatus",
    "PlanDecision",
    "PlanReview",
    "Proposal",
    "RecordChain",
    "RecordKind",
    "Refund",
    "StockLevel",
    "Ticket",
    "TicketStatus",
    "Transport",
    "args_digest",
]
