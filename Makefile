# Every target creates or reuses .venv and installs what it needs, Debian packages
# included, so that a fresh machine needs nothing but `make`.
PYTHON  ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_PKGS := prometheus

.PHONY: demo test lint bench deps system-deps crds clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

# Debian's Prometheus and promtool are real components of the tests and the demo.
system-deps:
	@command -v prometheus >/dev/null && command -v promtool >/dev/null || { \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $(APT_PKGS); }

deps: $(STAMP) system-deps

lint: $(STAMP)
	$(BIN)/ruff check operator tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

test: deps lint
	$(BIN)/pytest -q -p no:cacheprovider tests

# Until the closed-loop demo lands: plan seed 000's example and write its plot.
demo: deps
	mkdir -p demo-report
	$(BIN)/infertune plan --model kimi-k2.6 --gpu b200 --tp 4,8,16 --workload coding-agent \
	  --min-stream-tps 25 --max-ttft 3 --fit 5.2,1.65 --demand-rps 2 --pool-gpus 64 \
	  --plot demo-report/plan.png | tee demo-report/plan.txt
	@echo "report: demo-report/plan.txt, plot: demo-report/plan.png"

bench: deps
	$(BIN)/python -m bench

crds: $(STAMP)
	$(BIN)/infertune crds --out crds --reference docs/crd-reference.md
	mkdir -p charts/infertune/files/crds && cp crds/*.yaml charts/infertune/files/crds/

clean:
	rm -rf $(VENV) demo-report .mypy_cache .ruff_cache
