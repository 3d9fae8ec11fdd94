"""The shape of the code: no import cycle inside an app and no app importing one above it
(the contracts in pyproject.toml, checked by import-linter), no module longer than a
reader can hold, and none the architecture does not name."""

import os
from pathlib import Path

from importlinter.cli import EXIT_STATUS_SUCCESS, lint_imports

ROOT = Path(__file__).resolve().parent.parent
APPS = ("agentportal", "approvals", "runs")
MAX_LINES = 400


def _modules():
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            if "migrations" not in path.parts:
                yield path.relative_to(ROOT).as_posix(), len(path.read_text().splitlines())


def test_the_import_contracts_are_kept(monkeypatch):
    # given the contracts of pyproject.toml, read from the project's root
    monkeypatch.chdir(ROOT)

    # when import-linter checks them on a fresh graph
    status = lint_imports(config_filename=os.fspath(ROOT / "pyproject.toml"), no_cache=True)

    # then every contract is kept
    assert status == EXIT_STATUS_SUCCESS


def test_no_module_is_longer_than_the_limit():
    # given every module of the apps but their migrations
    lengths = dict(_modules())
    assert "runs/worker.py" in lengths

    # when comparing each with the limit
    too_long = {module: lines for module, lines in lengths.items() if lines > MAX_LINES}

    # then none is over
    assert too_long == {}


def _named_modules(app: str) -> set[str]:
    """How docs/architecture.md names each module of the app: its path inside the app, or a
    management command by its name."""
    names = set()
    for path in (ROOT / app).rglob("*.py"):
        relative = path.relative_to(ROOT / app)
        if "migrations" in relative.parts or path.name == "__init__.py":
            continue
        commands = relative.parts[:2] == ("management", "commands")
        names.add(path.stem if commands else relative.as_posix())
    return names


def test_the_architecture_names_every_module():
    # given the architecture's "Every module" section, a paragraph per app
    section = (ROOT / "docs" / "architecture.md").read_text().split("## Every module", 1)[1]
    section = section.split("\n## ", 1)[0]
    paragraphs = {
        app: text for app in APPS for text in section.split("\n\n") if f"**`{app}`**" in text
    }

    # when looking for each module of each app in its app's paragraph
    missing = {
        app: sorted(name for name in _named_modules(app) if f"`{name}`" not in paragraphs[app])
        for app in APPS
    }

    # then each is named there, so a new module comes with its line in the map
    assert missing == {app: [] for app in APPS}
