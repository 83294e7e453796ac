# Every target creates or reuses .venv and installs what it needs, Debian packages
# included, so that a fresh machine needs nothing but `make`.
PYTHON  ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_PKGS := prometheus

.PHONY: demo test unit lint bench deps system-deps crds clean

# The operator (pyproject.toml) and its lab (lab/pyproject.toml: the twin, the demo, the benchmark).
$(STAMP): pyproject.toml lab/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,plot]' -e ./lab
	touch $(STAMP)

# Debian's Prometheus and promtool are real components of the tests and the demo.
system-deps:
	@command -v prometheus >/dev/null && command -v promtool >/dev/null || { \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $(APT_PKGS); }

deps: $(STAMP) system-deps

lint: $(STAMP)
	$(BIN)/ruff check operator lab tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports

test: deps lint
	$(BIN)/pytest -q -p no:cacheprovider tests

# The fast loop: the pure unit tests only (no Prometheus, no emulator), under a minute.
unit: $(STAMP)
	$(BIN)/pytest -q -p no:cacheprovider tests/unit

# The closed loop on this machine: kmock's emulated cluster, the fleet agent with simulated vLLM
# replicas, Debian's Prometheus and the operator, through a ramp, a 3x spike and context growth.
demo: deps
	$(BIN)/infertune demo --report demo-report
	@echo "report: demo-report/report.md (plots demo-report/*.png, figures demo-report/summary.json)"

bench: deps
	$(BIN)/python -m benchmarks

crds: $(STAMP)
	$(BIN)/infertune crds --out crds --reference docs/crd-reference.md
	mkdir -p charts/infertune/files/crds && cp crds/*.yaml charts/infertune/files/crds/

clean:
	rm -rf $(VENV) demo-report .mypy_cache .ruff_cache
