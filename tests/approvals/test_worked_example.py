"""The worked example of docs/architecture.md, followed: a tool that needs a supervisor's
approval (tests/extension_app/voucher.py), registered by an app of its own, waits in the
inbox, on the call page and in the chat like a refund, and is granted once when approved."""

from django.contrib.auth.models import User

from approvals.models import Approval, ApprovalStatus
from runs import conversations, worker
from runs.models import AgentRun, RunStatus
from tests import factories
from tests.extension_app import voucher
from tests.pages import signed_in


def _page(username: str, path: str) -> str:
    response = signed_in(username).get(path)
    assert response.status_code == 200, (path, response.status_code)
    return response.content.decode()


def test_a_new_tool_needing_approval_waits_where_people_are_and_is_granted_once(demo, api):
    # given a shop whose agent offers goodwill vouchers, and alice asking in her chat
    factories.release_publish(
        merchant=demo, model=f"scripted:{voucher.SCRIPT}", tools=[voucher.TOOL]
    )
    voucher.GRANTED.clear()
    alice = User.objects.get(username="alice")
    conversation = conversations.conversation_create(merchant=demo, customer=alice)
    conversations.message_send(conversation=conversation, text="My parcel came late")

    # when the agent runs
    worker.tick()

    # then the call waits for a person, as a refund would
    approval = Approval.objects.get()
    assert (approval.tool_name, approval.status) == (voucher.TOOL, ApprovalStatus.PENDING_APPROVAL)
    assert approval.proposed_args == {"amount": "15.00", "reason": "My parcel came late"}
    inbox = _page("sam", "/portal/")
    assert f"/portal/approvals/{approval.interrupt_id}/" in inbox
    call_page = _page("sam", f"/portal/approvals/{approval.interrupt_id}/")
    assert "15.00" in call_page and "My parcel came late" in call_page
    chat = _page("alice", "/portal/chat/")
    assert "My parcel came late" in chat
    assert voucher.GRANTED == {}

    # when sam approves it, and the agent goes on
    decided = api("sam").post(
        f"/api/v1/approvals/{approval.interrupt_id}/decision",
        {"decision": "approve", "args_digest": approval.digest_on_the_table},
        format="json",
    )
    assert decided.status_code == 200, decided.content
    worker.tick()
    worker.tick()

    # then the voucher was granted once, and alice is told so
    run = AgentRun.objects.get(pk=approval.run_id)
    assert run.status == RunStatus.COMPLETED, (run.status, run.error_code, run.error_detail)
    assert list(voucher.GRANTED.values()) == [{"status": "granted", "amount": "15.00"}]
    assert "A voucher of 15.00 is yours." in _page("alice", "/portal/chat/")
