"""Every state change of a run. The only place in `runs` that opens transactions; its row locks
are taken through runs.locks.

Lock order, everywhere: Merchant -> Membership -> Conversation -> AgentRun -> the domain's rows.
On SQLite the lock helpers take no row lock; each transaction takes the database's write lock at
BEGIN (IMMEDIATE), and every transition is also a conditional UPDATE whose row count decides.

By concern:
- queueing: accepting a run (idempotency replays, releases, the open-run limit) and waking
  workers;
- changes: a run's change computed before the transaction and written inside it (ending,
  resuming, waiting);
- scheduling: claiming runs fairly within each shop's capacity, and model attempts;
- leases and steps: what a worker holds, and the guarded commit of its runs' steps;
- parking: runs a worker gives up, and leases renewed during slow calls;
- maintenance: the once-a-minute sweeps and the heartbeat;
- records: rows a domain writes on a run's behalf (receipts, tool results, its event cursor);
- statements: the hand-written SQL of the hot path and its ORM twins.
"""

from runs.locks import run_lock
from runs.services.changes import (
    WAITING_STATUSES,
    RunChange,
    run_cancel,
    run_changes_write,
    run_events_append_locked,
    run_fail_locked,
    run_finish_locked,
    run_resume_locked,
    run_snapshot_save_locked,
    run_wait_expire_locked,
    run_wait_move_locked,
    wait_fields,
)
from runs.services.leases import AccessRevoked, Lease, LostRun, lease_holds, process_name
from runs.services.maintenance import (
    deadlines_enforce,
    heartbeat_record,
    leases_expired_requeue,
    maintain,
    ticks_for_queued,
    waits_expire,
)
from runs.services.parking import (
    leases_of_lost_processes_release,
    leases_renew,
    parked_expire,
    run_fail_access_revoked,
    run_park,
    run_parked_fail,
    run_unpark,
    runs_release,
)
from runs.services.queueing import (
    membership_lock,
    open_runs_check,
    queue_run,
    release_resolve,
    release_save,
    request_hash,
    run_insert_locked,
    tick_enqueue,
)
from runs.services.records import (
    run_event_cursor_move_locked,
    run_input_record_locked,
    tool_execution_record_locked,
)
from runs.services.scheduling import runs_claim
from runs.services.steps import (
    StepCommit,
    database_error_transient,
    model_attempt_finish,
    runs_step_commit,
)

__all__ = [
    "WAITING_STATUSES",
    "AccessRevoked",
    "Lease",
    "LostRun",
    "RunChange",
    "StepCommit",
    "database_error_transient",
    "deadlines_enforce",
    "heartbeat_record",
    "lease_holds",
    "leases_expired_requeue",
    "leases_of_lost_processes_release",
    "leases_renew",
    "maintain",
    "membership_lock",
    "model_attempt_finish",
    "open_runs_check",
    "parked_expire",
    "process_name",
    "queue_run",
    "release_resolve",
    "release_save",
    "request_hash",
    "run_cancel",
    "run_changes_write",
    "run_event_cursor_move_locked",
    "run_events_append_locked",
    "run_fail_access_revoked",
    "run_fail_locked",
    "run_finish_locked",
    "run_input_record_locked",
    "run_insert_locked",
    "run_lock",
    "run_park",
    "run_parked_fail",
    "run_resume_locked",
    "run_snapshot_save_locked",
    "run_unpark",
    "run_wait_expire_locked",
    "run_wait_move_locked",
    "runs_claim",
    "runs_release",
    "runs_step_commit",
    "tick_enqueue",
    "ticks_for_queued",
    "tool_execution_record_locked",
    "wait_fields",
    "waits_expire",
]
