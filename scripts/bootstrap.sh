#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Install everything the demo and the tests need on a fresh machine, idempotently:
#  1. Debian packages (sandbox hosts, systemd-analyze, Debian's python3.11 venv support)
#  2. the controller venv .venv (Python 3.11, pinned ranges from pyproject.toml)
#  3. a wheelhouse with huggingface_hub for the sandbox hosts (no PyPI from inside)
#  4. the sandbox host root filesystem (Debian bookworm, systemd), the SGLang wheelhouse
#     and the local apt repository the hosts install from
#  5. the CPU-only SGLang parser venvs (0.5.23 and 0.5.11) used to check rendered command lines
# Each step is skipped when its stamp says it is up to date.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
log() { printf '\n== bootstrap: %s\n' "$*"; }

APT_PACKAGES=(mmdebstrap systemd-container iproute2 util-linux ca-certificates curl systemd python3.11-venv dpkg-dev)
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  log "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  timeout 300 apt-get update -qq
  timeout 600 apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

PYTHON=${CT200_PYTHON:-python3.11}
venv_stamp=$(cat pyproject.toml tests/support/pyproject.toml | sha256sum | cut -c1-16)
if [[ ! -x .venv/bin/python || "$(cat .venv/.ct200-stamp 2>/dev/null)" != "$venv_stamp" ]]; then
  log "controller venv .venv ($($PYTHON --version))"
  "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
  # the test-only distribution (the local Hub): beside the product, never inside it
  .venv/bin/python -m pip install -q --disable-pip-version-check -e tests/support
  echo "$venv_stamp" > .venv/.ct200-stamp
fi

if ! ls .cache/wheelhouse/huggingface_hub-2.4.*.whl >/dev/null 2>&1; then
  log "wheelhouse for sandbox hosts"
  mkdir -p .cache/wheelhouse
  .venv/bin/python -m pip download -q --disable-pip-version-check --only-binary=:all: \
    -d .cache/wheelhouse 'huggingface_hub>=2.4.0,<2.5'
fi

# sglang-router (issue 14, role ct200.deploy.router), pinned: its wheel and dependencies for the sandbox hosts
# (bind-mounted at /srv/wheelhouse with the rest, installed --no-index by the role), and a venv of it on
# this machine for the loopback traffic tests and benchmarks/traffic (the real router binary in front of stand-ins).
ROUTER_VERSION=0.3.2
if ! ls .cache/wheelhouse/sglang_router-${ROUTER_VERSION}-*.whl >/dev/null 2>&1; then
  log "sglang-router ${ROUTER_VERSION} into the sandbox wheelhouse"
  mkdir -p .cache/wheelhouse
  .venv/bin/python -m pip download -q --disable-pip-version-check --only-binary=:all: \
    -d .cache/wheelhouse "sglang-router==${ROUTER_VERSION}"
fi
if [[ ! -x .cache/router-venv-${ROUTER_VERSION}/bin/python ]]; then
  log "sglang-router ${ROUTER_VERSION} venv for the loopback traffic tests"
  "$PYTHON" -m venv ".cache/router-venv-${ROUTER_VERSION}"
  ".cache/router-venv-${ROUTER_VERSION}/bin/python" -m pip install -q --disable-pip-version-check --no-index \
    --find-links .cache/wheelhouse "sglang-router==${ROUTER_VERSION}"
fi

# The product's own dependencies (pyproject's [project] dependencies), for a venv that holds the
# ct200 command alone: tests/fleet/test_installed_cli.py installs it from here, with no index.
deps=$(.venv/bin/python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml","rb"))["project"]["dependencies"]))')
cli_stamp=$(printf '%s' "$deps" | sha256sum | cut -c1-16)
if [[ "$(cat .cache/cli-wheelhouse/.stamp 2>/dev/null)" != "$cli_stamp" ]]; then
  log "wheelhouse for the installed-CLI test (the ct200 command in a venv of its own, offline)"
  rm -rf .cache/cli-wheelhouse && mkdir -p .cache/cli-wheelhouse
  mapfile -t dep_list <<<"$deps"
  .venv/bin/python -m pip download -q --disable-pip-version-check --only-binary=:all: -d .cache/cli-wheelhouse \
    "${dep_list[@]}" 'setuptools>=68' wheel
  echo "$cli_stamp" > .cache/cli-wheelhouse/.stamp
fi

log "sandbox root filesystem"
tests/support/sandbox/build-rootfs.sh

log "SGLang wheelhouse for the sandbox hosts (installed by the sglang_runtime role)"
scripts/sglang-wheelhouse.sh 0.5.23
log "local apt repository for the sandbox hosts (no internet inside): sglang_runtime, weight_peer and monitoring install from it"
scripts/local-apt-repo.sh ninja-build numactl python3-apt nginx-light prometheus prometheus-blackbox-exporter

for v in 0.5.23 0.5.11; do
  log "SGLang $v parser venv"
  scripts/sglang-parse-venv.sh "$v"
done

# ansible-test's sanity venvs (pylint, validate-modules, ...): tools like the ones above, made
# once for this ansible-core, so that the suite's sanity test only tests.
sanity_stamp="$(.venv/bin/ansible-test --version 2>/dev/null) $(sha256sum tests/support/ansible_test_get_pip.py | cut -c1-16)"
if [[ "$(cat .cache/ansible-test-home/.ct200-stamp 2>/dev/null)" != "$sanity_stamp" ]]; then
  log "ansible-test sanity venvs"
  .venv/bin/python tests/support/sanity_tree.py --prime-venvs
  echo "$sanity_stamp" > .cache/ansible-test-home/.ct200-stamp
fi
log "ready"
