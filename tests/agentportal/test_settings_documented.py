"""The README is the operator's reference: every environment variable the product reads (its
settings and any other module that reads the environment) is named there."""

import ast
import re
from pathlib import Path

from django.conf import settings

from agentportal import env

ROOT = Path(settings.BASE_DIR)
PACKAGES = ("agentportal", "runs", "approvals")
NAME = re.compile(r"[A-Z][A-Z0-9_]*")


def _is_environ(node: ast.AST) -> bool:
    """`os.environ` (or a bare `environ` imported from os)."""
    if isinstance(node, ast.Attribute):
        return node.attr == "environ"
    return isinstance(node, ast.Name) and node.id == "environ"


def _called_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def variables_read(source: str) -> set[str]:
    """The environment variables a module reads: `os.environ.get(...)`, `os.environ[...]`,
    `os.getenv(...)`, the settings' `env_*(...)` helpers, and `dj_database_url.config()`
    (which reads DATABASE_URL). Writes (`os.environ[...] = `, `setdefault`) are not reads."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        name = None
        if isinstance(node, ast.Call):
            called = _called_name(node)
            first = node.args[0] if node.args else None
            text = first.value if isinstance(first, ast.Constant) else None
            from_environ = called == "get" and _is_environ(node.func.value)
            if from_environ or called == "getenv" or called.startswith("env_"):
                name = text
            elif called == "config" and getattr(node.func.value, "id", "") == "dj_database_url":
                name = "DATABASE_URL"
        elif (
            isinstance(node, ast.Subscript)
            and _is_environ(node.value)
            and isinstance(node.ctx, ast.Load)
            and isinstance(node.slice, ast.Constant)
        ):
            name = node.slice.value
        if isinstance(name, str) and NAME.fullmatch(name):
            found.add(name)
    return found


def test_the_reader_finds_each_way_a_variable_is_read():
    source = (
        "import os\nimport dj_database_url\n"
        "A = os.environ.get('AP_A', '1')\nB = os.environ['AP_B']\nC = os.getenv('AP_C')\n"
        "D = env_int('AP_D', 3)\nE = dj_database_url.config(default='sqlite://')\n"
        "os.environ['AP_WRITTEN'] = '1'\nos.environ.setdefault('AP_DEFAULTED', 'x')\n"
    )

    assert variables_read(source) == {"AP_A", "AP_B", "AP_C", "AP_D", "DATABASE_URL"}


def test_every_environment_variable_the_product_reads_is_in_the_readme():
    # given every variable the settings and the product's other modules read
    read: dict[str, str] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for name in variables_read(path.read_text()):
                read.setdefault(name, str(path.relative_to(ROOT)))
    assert {"DATABASE_URL", "DJANGO_SECRET_KEY", "AGENTPORTAL_API_RATE"} <= set(read)

    # when the README is read
    readme = (ROOT / "README.md").read_text()

    # then each is named there, as code (`NAME` or `NAME=value`)
    missing = {
        name: where for name, where in read.items() if not re.search(rf"`{name}(=[^`]*)?`", readme)
    }
    assert not missing, f"read by the product but not in the README: {missing}"


def _readme_table() -> set[str]:
    """The variables of the README's table (Environment variables), one a row."""
    section = (ROOT / "README.md").read_text().split("### Environment variables", 1)[1]
    return set(re.findall(r"^\| `([A-Z][A-Z0-9_]*)` \|", section.split("\n## ", 1)[0], re.M))


def test_the_readmes_table_lists_exactly_what_the_product_reads():
    # given every variable a module of the product reads
    read = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            read |= variables_read(path.read_text())

    # then the table has a row for each, and none for a variable nothing reads any more
    table = _readme_table()
    assert sorted(read - table) == []
    assert sorted(table - read) == []


def test_each_app_reads_its_own_settings_once_in_its_conf():
    # given the variables the product read (the tests' own readings left out), each with the
    # module that read it
    read_by = {name: by for name, by in env.READ.items() if by.split(".")[0] in PACKAGES}

    # then Django's own are read by the settings and the apps' by their conf modules
    readers = set(read_by.values())
    assert readers <= {"agentportal.settings", "agentportal.conf", "runs.conf", "approvals.conf"}
    assert read_by["AGENTPORTAL_API_RATE"] == "agentportal.conf"
    assert read_by["AGENTPORTAL_WORKER_IN_FLIGHT"] == "runs.conf"
    assert read_by["AGENTPORTAL_STOCK_LATENCY_SECONDS"] == "approvals.conf"
    assert read_by["DJANGO_ALLOWED_HOSTS"] == "agentportal.settings"
    # and nothing else in an app reads one of them from the environment again
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            # (the side-by-side script runs before Django, for the processes it starts)
            if module in readers or module in ("agentportal.env", "approvals.bench.side_by_side"):
                continue
            again = variables_read(path.read_text()) & set(read_by)
            assert not again, f"{module} reads {sorted(again)} again"
