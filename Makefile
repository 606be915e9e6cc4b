# ct200-deploy: the two commands of the README, and the pieces they are made of.
SHELL := /bin/bash
VENV  := .venv
PY    := $(VENV)/bin/python
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg

.PHONY: demo test bootstrap bootstrap-dev lint clean-sandbox

## Main job on the embedded default: local Hub + sandbox fleet, full deploy_kimi.yml run (no GPU).
demo: bootstrap
	@scripts/demo.sh

## Whole test suite (installs what it needs first); ends with "N passed, N failed".
test: bootstrap
	@scripts/run-tests.sh

bootstrap:
	@scripts/bootstrap.sh

lint: bootstrap
	@. $(VENV)/bin/activate && ANSIBLE_INVENTORY_UNPARSED_FAILED=false ansible-lint --profile production --offline

clean-sandbox:
	@tests/support/sandbox/sandbox.sh down || true
