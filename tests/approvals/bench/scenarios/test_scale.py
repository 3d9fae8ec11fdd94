"""The benchmark's `scale` scenario at tiny sizes: it seeds, times every hot path and writes
its curves. The timings themselves are not checked here (they are the benchmark's to report)."""

import json

import pytest
from django.core.management import CommandError, call_command

from approvals.models import Approval, ApprovalStatus
from runs.models import AgentRun, RunEvent, RunStatus

PATHS = {
    "claim",
    "inbox_portal",
    "inbox_api",
    "run_page_portal",
    "run_api",
    "live_pages",
    "run_streams",
    "reconcile",
    "prune_batch",
}


@pytest.mark.django_db
def test_scale_scenario_writes_each_hot_paths_curve(tmp_path, capsys):
    call_command(
        "bench",
        scenario="scale",
        sizes="3:200,5:400",
        repeat=1,
        no_rss=True,
        artifacts=str(tmp_path),
    )

    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    scale = printed["scale"]
    assert [(size["shops"], size["runs"]) for size in scale["sizes"]] == [(3, 200), (5, 400)]
    assert all(set(size["ms"]) == PATHS for size in scale["sizes"])
    assert set(scale["growth"]) == PATHS
    assert scale["rss_mb"] is None
    assert json.loads((tmp_path / "scale.json").read_text())["sizes"] == scale["sizes"]
    table = (tmp_path / "scale.md").read_text()
    assert all(f"| {path} |" in table for path in PATHS)
    assert (tmp_path / "scale.svg").read_text().startswith("<svg")
    # The second size added to the first one's history; the timed writes were rolled back.
    assert AgentRun.objects.filter(status=RunStatus.COMPLETED).count() == 400
    assert RunEvent.objects.filter(run__status=RunStatus.COMPLETED).count() == 400 * 3
    assert Approval.objects.filter(status=ApprovalStatus.PENDING_APPROVAL).count() == 100
    assert AgentRun.objects.filter(status=RunStatus.QUEUED).count() == 20


@pytest.mark.django_db
def test_scale_sizes_must_grow(tmp_path):
    with pytest.raises(CommandError, match="must grow"):
        call_command(
            "bench", scenario="scale", sizes="5:400,3:200", no_rss=True, artifacts=str(tmp_path)
        )


@pytest.mark.bench
@pytest.mark.django_db(transaction=True)
def test_scale_reads_the_memory_of_the_portals_web_and_worker_processes(bench, tmp_path):
    result = bench(
        "--scenario", "scale", "--runs", "5", "--sizes", "2:50", "--repeat", "1",
        "--artifacts", str(tmp_path),
    )  # fmt: skip

    assert list(result) == ["scale", "scenario", "database"]
    assert result["scenario"] == "scale"
    scale = result["scale"]
    assert [(size["shops"], size["runs"]) for size in scale["sizes"]] == [(2, 50)]
    assert set(scale["growth"]) == PATHS
    assert set(scale["rss_mb"]) == {"web", "worker"}
    assert all(mb > 0 for mb in scale["rss_mb"].values())
    # The portal's worker ran the runs queued for the claim.
    assert not AgentRun.objects.filter(status=RunStatus.QUEUED).exists()
