# The two commands of README. Each sets everything up first (idempotent, about a second
# when nothing changed), then runs.
#   make check                       the gate against the pinned vLLM (VLLM=0.33.0 for the other release,
#                                    VLLM_SRC=/path/to/vllm for a checkout)
#   make test                        the test suite, on every supported release
SHELL := /bin/bash
VENV := .venv
VERSIONS := $(shell grep -Ev '^\s*(\#|$$)' impl/vllm-versions.txt)
JSON ?= out/check.json

.PHONY: setup check test
setup:
	@scripts/setup.sh

check: setup
	@mkdir -p $(dir $(JSON))
	$(VENV)/bin/kvspec check $(if $(VLLM),--vllm $(VLLM)) $(if $(VLLM_SRC),--vllm-src $(VLLM_SRC)) --json $(JSON)

# The suite drives real vLLM in process, so it runs once per supported release.
test: setup
	@set -e; for v in $(VERSIONS); do \
	  echo "== tests against vLLM $$v"; \
	  KVSPEC_VLLM=$$v $(VENV)/bin/python -m pytest -q; \
	done
