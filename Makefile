# The two commands of README. Each sets up what it runs on first (idempotent, about a second
# when nothing changed), then runs: make check the environment and its one release, make test and
# make matrix the releases they cover.
#   make check                       the gate against the pinned vLLM (VLLM=0.33.0 for another release,
#                                    VLLM_SRC=/path/to/vllm for a checkout)
#   make test                        the test suite, on the two newest supported releases
#                                    (TEST_WORKERS=1 for one process)
#   make matrix                      the gate on every older supported release (CI runs it too)
SHELL := /bin/bash
VENV := .venv
VERSIONS := $(shell grep -Ev '^\s*(\#|$$)' impl/vllm-versions.txt)
PINNED := $(firstword $(VERSIONS))
SUITE_VERSIONS := $(wordlist 1,2,$(VERSIONS))
MATRIX_VERSIONS := $(wordlist 3,$(words $(VERSIONS)),$(VERSIONS))
JSON ?= out/check.json
# Test files run in parallel, one per worker process (pytest-xdist); each worker imports its own vLLM.
TEST_WORKERS ?= auto

.PHONY: setup check test matrix
setup:
	@scripts/setup.sh

# The gate needs its own release alone (a checkout: the environment and the pinned release), so a
# fresh machine's first make check fetches and import-checks one release, not every one.
check:
	@scripts/setup.sh $(if $(filter $(VLLM),$(VERSIONS)),$(VLLM),$(PINNED))
	@mkdir -p $(dir $(JSON))
	$(VENV)/bin/kvspec check $(if $(VLLM),--vllm $(VLLM)) $(if $(VLLM_SRC),--vllm-src $(VLLM_SRC)) --json $(JSON)

# The suite drives real vLLM in process, so it runs once per release: the two newest. The
# older releases differ from them only by the rules of spec/releases.py, which the gate reads;
# `make matrix` runs the whole gate on each.
test: setup
	@command -v redis-server >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
	  && apt-get update -qq && apt-get install -y -qq redis-server >/dev/null; } \
	  || echo "make test: no redis-server (Debian: apt-get install redis-server): the Redis campaign test is skipped"
	@set -e; for v in $(SUITE_VERSIONS); do \
	  echo "== tests against vLLM $$v"; \
	  KVSPEC_VLLM=$$v $(VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile; \
	done

# Every check on every older release, each judged against the findings recorded for it
# (release-findings.toml): one table and out/check-<version>.json each (kvspec/tools/matrix.py).
matrix:
	@scripts/setup.sh $(MATRIX_VERSIONS)
	@mkdir -p out
	$(VENV)/bin/kvspec matrix $(MATRIX_VERSIONS)
