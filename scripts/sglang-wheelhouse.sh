#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Wheelhouse from which the ct200.deploy.sglang_runtime role installs SGLang on
# the SANDBOX hosts (no GPU, no internet), exactly like an air-gapped site
# installs from its own wheelhouse (--no-index --find-links DIR).
#
# What is in it, and why not all of SGLang's dependencies:
#   sglang==VERSION (the real release wheel), CPU torch 2.13.0, triton and the
#   pure-Python packages SGLang's argument parser imports -- the same set as
#   scripts/sglang-parse-venv.sh minus the resolver extras (transformers & co).
#   The full dependency closure of sglang 0.5.23 is a CUDA 13 build (torch
#   2.14.1 + cu13 wheels, flashinfer, sglang-kernel: several GB) that cannot run
#   without a GPU anyway.
#   ct200-sglang-standin: the TEST STAND-IN (tests/support/sglang_standin) packaged as a
#   wheel whose module `ct200_sglang_standin` the sandbox units run instead of
#   `sglang.launch_server` (role variable sglang_service_launcher).
# requirements.txt lists every wheel pinned; the role installs it with
# --no-deps so nothing is resolved from an index.
#
# Usage: scripts/sglang-wheelhouse.sh [VERSION] [DEST]
#   VERSION default 0.5.23; DEST default <repo>/.cache/sglang-wheelhouse-VERSION-cpu
# Idempotent (stamp); safe to run concurrently (flock).
set -euo pipefail
VERSION="${1:-0.5.23}"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
DEST="${2:-${REPO_ROOT}/.cache/sglang-wheelhouse-${VERSION}-cpu}"
PY="${SGLANG_WHEELHOUSE_PYTHON:-/usr/bin/python3.11}"
# The parse set of scripts/sglang-parse-venv.sh (0.5.23), without the resolver extras.
NODEPS=("sglang==${VERSION}" "torch==2.13.0" "triton==3.9.0")
# pyyaml: SGLang's --config merger (srt/utils/server_args_config_parser.py) imports
# yaml, and the role passes the API key through --config. sglang does not declare it
# (a full install gets it through transformers); without it an instance with an API key
# dies at start with "No module named 'yaml'".
WITHDEPS=(sympy networkx jinja2 fsspec filelock typing_extensions
          msgspec numpy orjson psutil pybase64 requests packaging pillow starlette
          pydantic pyzmq tqdm IPython aiohttp fastapi uvicorn ninja pyyaml)
RECIPE=3
STANDIN_SHA=$(sha256sum "${REPO_ROOT}/tests/support/sglang_standin/sglang_standin.py" | cut -c1-16)
STAMP_CONTENT="recipe=${RECIPE} sglang=${VERSION} standin=${STANDIN_SHA}"
STAMP="${DEST}/.ct200-wheelhouse-stamp"

mkdir -p "$(dirname "${DEST}")"
exec 9>"${DEST}.lock"
flock 9
if [[ -f "${STAMP}" && "$(cat "${STAMP}")" == "${STAMP_CONTENT}" ]]; then
  echo "sglang-wheelhouse: ${DEST} is up to date"
  exit 0
fi
echo "sglang-wheelhouse: building ${DEST}"
rm -rf "${DEST}" && mkdir -p "${DEST}"
PIP=("${PY}" -m pip --disable-pip-version-check --no-input -q)
CONSTRAINTS="${DEST}/.constraints.txt"
printf '%s\n' "torch==2.13.0" > "${CONSTRAINTS}"
"${PIP[@]}" download --no-deps --only-binary=:all: -d "${DEST}" "${NODEPS[@]}"
"${PIP[@]}" download --only-binary=:all: -c "${CONSTRAINTS}" -d "${DEST}" "${WITHDEPS[@]}"

# The stand-in as a wheel (module ct200_sglang_standin), built by hand: a wheel
# is a zip with METADATA/WHEEL/RECORD, no build backend needed offline.
# Its version carries the source hash, so a changed stand-in changes requirements.txt
# and the role's stamp (the hosts reinstall it).
"${PY}" - "${REPO_ROOT}/tests/support/sglang_standin/sglang_standin.py" "${DEST}" "${STANDIN_SHA:0:8}" <<'PYEOF'
import base64, hashlib, sys, zipfile
src, dest, sha = sys.argv[1], sys.argv[2], sys.argv[3]
name, version = "ct200_sglang_standin", "1.0.0+" + sha
dist = f"{name}-{version}.dist-info"
files = {
    f"{name}.py": open(src, "rb").read(),
    f"{dist}/METADATA": (f"Metadata-Version: 2.1\nName: ct200-sglang-standin\nVersion: {version}\n"
                         "Summary: TEST STAND-IN for sglang.launch_server on GPU-less sandbox hosts (NOT SGLang)\n").encode(),
    f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: ct200\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = []
for path, data in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record.append(f"{path},sha256={digest},{len(data)}")
record.append(f"{dist}/RECORD,,")
files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
with zipfile.ZipFile(f"{dest}/{name}-{version}-py3-none-any.whl", "w", zipfile.ZIP_DEFLATED) as whl:
    for path, data in files.items():
        whl.writestr(zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0)), data)
PYEOF

# requirements.txt: every wheel pinned (installed with --no-deps: nothing resolved).
"${PY}" - "${DEST}" <<'PYEOF'
import os, re, sys
dest = sys.argv[1]
pins = set()
for whl in os.listdir(dest):
    if whl.endswith(".whl"):
        name, version = whl.split("-")[:2]
        pins.add(f"{re.sub(r'[-_.]+', '-', name).lower()}=={version}")
with open(os.path.join(dest, "requirements.txt"), "w") as out:
    out.write("".join(p + "\n" for p in sorted(pins)))
PYEOF
rm -f "${CONSTRAINTS}"
du -sh "${DEST}"
echo "${STAMP_CONTENT}" > "${STAMP}"
echo "sglang-wheelhouse: ready: ${DEST} ($(grep -c . "${DEST}/requirements.txt") wheels)"
