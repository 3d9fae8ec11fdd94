# Set-up for a fresh machine: `make demo` runs the product, `make test` runs the tests.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed
PYTEST_ARGS ?=
# Test processes at once (pytest-xdist), each on its own test database; 0 runs them in this one.
TEST_PROCESSES ?= 2

.PHONY: demo test install lint format bench bench-peers

$(INSTALLED): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	touch $(INSTALLED)

install: $(INSTALLED)

# The demo's own random secret key, made once. The settings read it only with DEBUG on (and
# DJANGO_SECRET_KEY unset): with DEBUG off they take DJANGO_SECRET_KEY alone and refuse this one.
.demo-secret-key:
	$(PYTHON) -c "import secrets; print(secrets.token_urlsafe(50))" > $@

demo: export DJANGO_DEBUG = 1
demo: $(INSTALLED) .demo-secret-key
	$(PY) manage.py migrate --noinput
	$(PY) manage.py seed_demo
	$(PY) manage.py runportal

test: $(INSTALLED)
	$(PY) -m pytest -n $(TEST_PROCESSES) $(PYTEST_ARGS)

lint: $(INSTALLED)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(INSTALLED)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# The benchmark measures the product as deployed (DEBUG off), with a random key for this run
# unless DJANGO_SECRET_KEY gives one.
bench: $(INSTALLED)
	export DJANGO_SECRET_KEY="$${DJANGO_SECRET_KEY:-$$($(PY) -c 'import secrets; print(secrets.token_urlsafe(50))')}" && \
	$(PY) manage.py migrate --noinput && \
	$(PY) manage.py seed_demo && \
	$(PY) manage.py bench --runs 2000 --workers 2

# The portal and LangGraph + PostgresSaver side by side (approvals/bench/side_by_side.py), on
# the PostgreSQL server of DATABASE_URL (DEBUG off, a random key unless DJANGO_SECRET_KEY gives
# one); the peer's packages come with the `peers` extra.
bench-peers: $(INSTALLED)
	$(PY) -m pip install --quiet -e ".[test,peers]"
	$(PY) -m approvals.bench.side_by_side --repeats 3
