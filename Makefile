# Every target creates or reuses .venv and installs what it needs, Debian packages
# included, so that a fresh machine needs nothing but `make`.
PYTHON  ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# prometheus: the tests' and the demo's Prometheus and promtool. iproute2, openssl: the chart test
# runs each pod in a network namespace against an emulated API server that speaks TLS.
APT_PKGS := prometheus iproute2 openssl
# The image: buildah builds and runs it, mmdebstrap makes its base from Debian's packages, podman
# imports that base (no image registry is reachable here).
IMAGE_APT_PKGS := buildah podman mmdebstrap uidmap
IMAGE      ?= localhost/infertune:0.1.0
BASE_IMAGE ?= localhost/infertune-python:bookworm
# pip in the build trusts this bundle (a TLS-inspecting proxy's CA lives there on these machines).
CA_BUNDLE  ?= /etc/ssl/certs/ca-certificates.crt

.PHONY: demo test unit lint bench deps system-deps crds clean image image-test image-deps base-image

# The operator (pyproject.toml) and its lab (lab/pyproject.toml: the twin, the demo, the benchmark).
$(STAMP): pyproject.toml lab/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,plot]' -e ./lab
	touch $(STAMP)

# Debian's Prometheus and promtool are real components of the tests and the demo.
system-deps:
	@command -v prometheus >/dev/null && command -v promtool >/dev/null && command -v ip >/dev/null \
	  && command -v openssl >/dev/null || { \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $(APT_PKGS); }

deps: $(STAMP) system-deps

lint: $(STAMP)
	$(BIN)/ruff check operator lab tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports

# TEST_ARGS: extra pytest arguments (.ci/run leaves out the chart runs that make image-test repeats).
test: deps lint
	$(BIN)/pytest -q -p no:cacheprovider tests $(TEST_ARGS)

# The fast loop: the pure unit tests only (no Prometheus, no emulator), under a minute.
unit: $(STAMP)
	$(BIN)/pytest -q -p no:cacheprovider tests/unit

# The closed loop on this machine: kmock's emulated cluster, the fleet agent with simulated vLLM
# replicas, Debian's Prometheus and the operator, through a ramp, a 3x spike and context growth.
demo: deps
	$(BIN)/infertune demo --report demo-report
	@echo "report: demo-report/report.md (plots demo-report/*.png, figures demo-report/summary.json)"

bench: deps
	$(BIN)/python -m benchmarks $(BENCH)

crds: $(STAMP)
	$(BIN)/infertune crds --out crds --reference docs/crd-reference.md
	mkdir -p charts/infertune/files/crds && cp crds/*.yaml charts/infertune/files/crds/

image-deps:
	@command -v buildah >/dev/null && command -v podman >/dev/null && command -v mmdebstrap >/dev/null || { \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $(IMAGE_APT_PKGS); }

# Debian bookworm's python3 (3.11) on a minimal root file system, made once and kept as $(BASE_IMAGE).
# Without recommends and with usr merged by mmdebstrap's hook (the usrmerge package pulls in perl),
# no manuals, docs or translations; ca-certificates for an HTTPS Prometheus.
base-image: image-deps
	@$(SUDO) podman image exists $(BASE_IMAGE) || { \
	  mkdir -p build && \
	  $(SUDO) mmdebstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
	    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr --aptopt='APT::Install-Recommends "false"' \
	    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
	    --dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/locale/*' \
	    --dpkgopt='path-exclude=/usr/share/info/*' bookworm build/python-base.tar && \
	  $(SUDO) podman import build/python-base.tar $(BASE_IMAGE) && rm build/python-base.tar; }

# --format docker keeps the HEALTHCHECK (OCI has none).
image: base-image
	$(SUDO) buildah bud --isolation chroot --network host --format docker \
	  $(if $(wildcard $(CA_BUNDLE)),--volume $(CA_BUNDLE):/etc/ssl/certs/ca-certificates.crt:ro) \
	  --build-arg PYTHON_IMAGE=$(BASE_IMAGE) -t $(IMAGE) -f Dockerfile .
	@$(SUDO) podman image inspect --format '$(IMAGE): {{.Size}} bytes' $(IMAGE)

# The built image's entry point, as the chart's Deployment runs it, against the emulated API server.
image-test: image deps
	$(BIN)/pytest -q -p no:cacheprovider tests/image --image $(IMAGE)

clean:
	rm -rf $(VENV) demo-report .mypy_cache .ruff_cache
