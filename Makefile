# Lakestream developer entry points. `make help` lists them.
SHELL := /bin/bash
VENV ?= $(CURDIR)/.venv
LAKE := $(VENV)/bin/lake
PY := $(VENV)/bin/python

.PHONY: help setup up down status demo test test-unit test-dags test-integration lint clean

help:
	@echo "make setup   install Python deps, JVM artifacts and MinIO (idempotent, cached)"
	@echo "make up      start the local stack (PostgreSQL, MinIO, Kafka, Connect, metastore, Thrift, Spark Connect, Data Docs, Airflow)"
	@echo "make down    stop the stack; leaves no process behind"
	@echo "make demo    setup + up + the product tour: CDC + events in, 7 days of history, gold backfill via Airflow, summary"
	@echo "make test    setup + up + unit, DAG and integration tests against the real stack + down"
	@echo "make lint    ruff + mypy"

setup:
	@bash infra/setup.sh

up: setup
	@$(LAKE) stack up

down:
	@if [ -x $(LAKE) ]; then $(LAKE) stack down; fi

status:
	@$(LAKE) stack status

demo: up
	@bash infra/demo.sh

lint:
	$(VENV)/bin/ruff check spark_jobs dags tests
	$(VENV)/bin/mypy

test-unit:
	$(PY) -m pytest tests/unit tests/dags

# Full suite against the real stack; the stack is stopped afterwards either way.
test: setup
	@set -o pipefail; rc=0; \
	$(LAKE) stack up || rc=$$?; \
	if [ $$rc -eq 0 ]; then $(PY) -m pytest -v --durations=25 tests || rc=$$?; fi; \
	$(LAKE) stack down || true; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: treating as failure"; rc=1; fi; \
	exit $$rc

clean: down
	rm -rf .lake
