"""Row locks are taken in one place per app (DESIGN 3: one lock order, everywhere): only
runs/locks.py and approvals/locks.py may call select_for_update."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APPS = ("agentportal", "runs", "approvals")
LOCK_MODULES = {Path("runs/locks.py"), Path("approvals/locks.py")}


def test_select_for_update_appears_only_in_the_lock_modules():
    # given every Python source of the project's apps but their migrations
    sources = [
        path
        for app in APPS
        for path in sorted((ROOT / app).rglob("*.py"))
        if "migrations" not in path.relative_to(ROOT).parts
    ]
    assert sources

    # when looking for select_for_update outside the lock modules
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sources
        if path.relative_to(ROOT) not in LOCK_MODULES
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if "select_for_update" in line
    ]

    # then there is none
    assert found == []
