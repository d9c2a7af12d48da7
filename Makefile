# queue-reaper: the two commands are `make demo` and `make test`.
#
# Every target runs against the real services (SPEC.md §7), which `make services` brings up
# idempotently (scripts/services; needs root). Any failing step fails the target: in
# particular pytest's exit code 5 (no tests collected) fails `make test`.

PYTHON ?= python3
PYTEST_ARGS ?=

# The steps of `test` depend on each other's side effects (services up, package installed), so
# they must not run concurrently even under `make -j`.
.NOTPARALLEL:

.PHONY: all install services bytecode demo test lint typecheck pytest metrics-check

all: test

# `install` always installs; `test` and `demo` reinstall only when pyproject.toml is newer than
# the last install (a pip resolve costs most of a minute). build/ is ignored by git.
INSTALLED := build/.installed

install:
	$(PYTHON) -m pip install --quiet --root-user-action=ignore -e '.[test]'
	@mkdir -p $(dir $(INSTALLED)) && touch $(INSTALLED)

$(INSTALLED): pyproject.toml
	$(MAKE) --no-print-directory install

services:
	scripts/services

# The package and the tests' helpers byte-compiled, as pip compiles a regular install: an
# editable one leaves it to each process, and where PYTHONDONTWRITEBYTECODE is set (it is on
# this machine class) every process compiles every module again. The suite starts many reaper
# processes (over 150 in the chaos tests alone): measured, 0.79 CPU-seconds a start without
# the bytecode, 0.60 with it.
# compileall rewrites only what is out of date (a changed file is still read from source).
bytecode:
	$(PYTHON) -m compileall -q reaper tests/support

demo: services $(INSTALLED) bytecode
	reaper demo

# Listed in the order they run; metrics-check comes last so the Python checks report first.
test: services $(INSTALLED) bytecode lint typecheck pytest metrics-check

lint:
	$(PYTHON) -m ruff check .

typecheck:
	$(PYTHON) -m mypy

# Broker tests still spend part of their time waiting on the brokers (statistics gathered every
# second, consumers, the 60 s channel ticks, real reaper processes), so more workers than cores
# overlap those waits. Workers steal queued tests from each other (worksteal), and the long
# tests head the workers' shares (tests/support/schedule.py), so no worker is left alone behind
# a long test at the end. With statistics this quick the suite keeps both cores busy (93 % in a
# 238 s run with ten workers), and past eight workers more only contend: measured on two cores
# at their slower (a 10,000,000-step Python loop in 0.45 to 0.52 s, 1,270 tests), 6 workers
# 339 s, 8 workers 312 s, 10 workers 343, 364 and 369 s. PYTEST_ARGS comes last, so
# `make pytest PYTEST_ARGS="-n 0 -x"` overrides the worker count too.
PYTEST_WORKERS ?= 8

# Each worker collects every test module, and pytest rewrites each module's asserts as it
# imports it. It caches the rewritten module beside the source, but not where
# PYTHONDONTWRITEBYTECODE is set (this machine class): then every worker rewrites every module,
# 5 s of CPU each, and ten workers spent the suite's first 28 s on it. So one collection runs
# first with the cache allowed, and the workers read it (1.9 s each). A collection error is left
# for the real run to report.
pytest:
	-@env -u PYTHONDONTWRITEBYTECODE $(PYTHON) -m pytest --collect-only -qq >/dev/null 2>&1
	$(PYTHON) -m pytest -n $(PYTEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

metrics-check:
	@for f in metrics/alerts.yml metrics/alerts_test.yml; do \
		test -f "$$f" || { echo "metrics-check: $$f is missing (SPEC.md §6)" >&2; exit 1; }; \
	done
	promtool check rules metrics/alerts.yml
	promtool test rules metrics/alerts_test.yml
