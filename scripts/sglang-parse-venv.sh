#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Create a CPU-only SGLang venv that can PARSE and RESOLVE SGLang command lines
# with SGLang's own code (docs: ../shared/reference/sglang.md section 7).
#
# It runs SGLang's argument parser (prepare_server_args) and, for 0.5.23,
# ServerArgs.resolve_once(); it cannot serve a model (no CUDA, no kernels).
# Used by tests/sglang/ (parser checks) and by tests/support/sglang_standin/ (the test
# stand-in that replaces `python -m sglang.launch_server` on sandbox hosts).
#
# Usage: scripts/sglang-parse-venv.sh [VERSION] [DEST]
#   VERSION  sglang release, default 0.5.23 (0.5.11 supported too)
#   DEST     default <repo>/.cache/sglang-venv-VERSION
# Env: SGLANG_VENV_PYTHON (default /usr/bin/python3.11 -- Debian's interpreter,
#      so the venv also runs inside the Debian bookworm sandbox hosts when
#      bind-mounted at the same path).
#
# Idempotent: a stamp file records what was built; a matching stamp exits 0
# at once. An interrupted build leaves no stamp and is rebuilt from scratch.
set -euo pipefail

VERSION="${1:-0.5.23}"
# Physical path: the repo is reachable through the collections/ symlink loop
# too, and a path through it must not make a second, different stamp.
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
DEST="${2:-${REPO_ROOT}/.cache/sglang-venv-${VERSION}}"
PY="${SGLANG_VENV_PYTHON:-/usr/bin/python3.11}"
TORCH_PIN="torch==2.13.0"

case "${VERSION}" in
  0.5.23)
    TRANSFORMERS="transformers==5.19.0"
    EXTRA=(dill sentencepiece gguf openai partial_json_parser einops
           "apache-tvm-ffi==0.1.11" loguru sympy networkx jinja2 fsspec filelock)
    NODEPS_EXTRA=("compressed-tensors==0.18.0")
    ;;
  0.5.11)
    TRANSFORMERS="transformers==5.6.0"
    EXTRA=(sympy dill sentencepiece gguf openai partial_json_parser einops loguru
           networkx jinja2 fsspec filelock)
    NODEPS_EXTRA=("compressed-tensors==0.18.0")
    ;;
  *)
    echo "sglang-parse-venv: unsupported version '${VERSION}' (supported: 0.5.23, 0.5.11)" >&2
    exit 2
    ;;
esac
BASE=(typing_extensions msgspec numpy orjson psutil pybase64 requests packaging
      pillow starlette pydantic pyzmq tqdm IPython aiohttp fastapi uvicorn)

# Everything that determines the venv content goes into the stamp. Bump
# RECIPE when the install steps below change.
RECIPE=3
STUB_SHA=$(sha256sum "${REPO_ROOT}/tests/support/sglang_standin/venv_stubs/torchvision/__init__.py" | cut -c1-16)
STAMP_CONTENT="recipe=${RECIPE} sglang=${VERSION} ${TORCH_PIN} ${TRANSFORMERS} python=${PY} stub=${STUB_SHA}"
STAMP="${DEST}/.ct200-parse-venv-stamp"

# One build per DEST at a time (CI and developers may call this concurrently).
mkdir -p "$(dirname "${DEST}")"
exec 9>"${DEST}.lock"
flock 9

if [[ -f "${STAMP}" ]] && [[ "$(cat "${STAMP}")" == "${STAMP_CONTENT}" ]] \
   && [[ -x "${DEST}/bin/python" ]]; then
  echo "sglang-parse-venv: ${DEST} is up to date (sglang ${VERSION})"
  exit 0
fi

if ! "${PY}" -c 'import venv, ensurepip' 2>/dev/null; then
  echo "sglang-parse-venv: ${PY} lacks venv/ensurepip; install it: apt-get install -y python3.11-venv" >&2
  exit 2
fi

echo "sglang-parse-venv: building ${DEST} (sglang ${VERSION}, CPU-only)"
rm -rf "${DEST}"
mkdir -p "$(dirname "${DEST}")"
"${PY}" -m venv "${DEST}"
VPY="${DEST}/bin/python"
PIP=("${VPY}" -m pip install --quiet --disable-pip-version-check --no-input)

CONSTRAINTS="${DEST}/.constraints.txt"
printf '%s\n' "${TORCH_PIN}" "${TRANSFORMERS}" > "${CONSTRAINTS}"

# 1. SGLang and CPU torch without their (CUDA) dependency trees.
"${PIP[@]}" --no-deps "sglang==${VERSION}" "${TORCH_PIN}"
# torch's own pure-python dependencies (not pulled by --no-deps).
"${PIP[@]}" -c "${CONSTRAINTS}" sympy networkx jinja2 fsspec filelock typing_extensions
# 2. What the parser and the resolver import.
"${PIP[@]}" -c "${CONSTRAINTS}" "${BASE[@]}" "${EXTRA[@]}" "${TRANSFORMERS}"
if ((${#NODEPS_EXTRA[@]})); then
  "${PIP[@]}" --no-deps "${NODEPS_EXTRA[@]}"
fi
# 3. Real triton (the resolver and 0.5.11's parse-time checks import it).
"${PIP[@]}" -c "${CONSTRAINTS}" --no-deps triton

# 4. torchvision import stub (tests/support/sglang_standin/venv_stubs/torchvision):
#    PyPI torchvision fails on CPU torch ("torchvision::nms does not exist");
#    SGLang and transformers only import names from it while parsing/resolving.
SITE="$("${VPY}" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
rm -rf "${SITE}/torchvision"
cp -r "${REPO_ROOT}/tests/support/sglang_standin/venv_stubs/torchvision" "${SITE}/torchvision"

# 5. Smoke: the parser must import and parse a trivial line.
"${VPY}" - <<'EOF'
import importlib.metadata as md
from sglang.srt.server_args import ServerArgs  # noqa: F401
print("sglang", md.version("sglang"), "torch", md.version("torch"))
EOF

echo "${STAMP_CONTENT}" > "${STAMP}"
echo "sglang-parse-venv: ready: ${VPY}"
