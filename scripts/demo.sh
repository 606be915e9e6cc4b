#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The main job on the embedded default: a local Hub (Kimi-K2.6-shaped public target,
# gated DFlash drafter) and a sandbox fleet of real systemd hosts, deployed with
# exactly the playbook operators run against inventories/ct200. The hosts start bare:
# the sglang_runtime role installs SGLang 0.5.23 from a wheelhouse (as on an air-gapped
# site) and ninja/numactl from a local apt repository. No GPU: the preflight reports GPUs
# absent, and the SGLang process on the hosts is the test stand-in (installed from the
# same wheelhouse) that validates its argv with SGLang's own parser.
# Client traffic goes through sglang-router (ct200.deploy.router on the first host, every instance drained
# through it) and Prometheus watches the fleet (ct200.deploy.monitoring): scripts/demo-observe.sh prints the
# router URL, one `ct200 status` table and an alert firing on a planted bad drafter.
# Env: CT200_DEMO_HOSTS (2), CT200_SANDBOX_TRAFFIC (router; none: no router), CT200_DEMO_NAME (sandbox host name
# prefix), CT200_DEMO_STATE_DIR (.cache/demo), CT200_SANDBOX_STATE (the fleet's state file).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck disable=SC1091
. .venv/bin/activate
export ANSIBLE_CONFIG="$PWD/ansible.cfg"
HOSTS=${CT200_DEMO_HOSTS:-2}
export CT200_SANDBOX_TRAFFIC=${CT200_SANDBOX_TRAFFIC:-router}
STATE_DIR=${CT200_DEMO_STATE_DIR:-$PWD/.cache/demo}
export CT200_DEMO_STATE_DIR=$STATE_DIR
demo_t0=$SECONDS
HUB_STATE=$STATE_DIR/localhub.json
mkdir -p "$STATE_DIR"
rm -f "$HUB_STATE"

hub_pid=""
cleanup() {
  tests/support/sandbox/sandbox.sh down >/dev/null 2>&1 || true
  [[ -n "$hub_pid" ]] && kill "$hub_pid" 2>/dev/null && wait "$hub_pid" 2>/dev/null
  true
}
trap cleanup EXIT

echo "== local Hub"
python -m localhub serve --host 127.0.0.1 --port 0 --data-dir .cache/localhub-data --state-file "$HUB_STATE" \
  > "$STATE_DIR/localhub.log" 2>&1 &
hub_pid=$!
for _ in $(seq 1 300); do [[ -s "$HUB_STATE" ]] && break; sleep 0.1; done
[[ -s "$HUB_STATE" ]] || { echo "local Hub did not start:"; cat "$STATE_DIR/localhub.log"; exit 1; }
CT200_HF_ENDPOINT=$(python -c 'import json,sys; print(json.load(open(sys.argv[1]))["url"])' "$HUB_STATE")
export CT200_HF_ENDPOINT
echo "   $CT200_HF_ENDPOINT"

echo "== sandbox fleet ($HOSTS hosts): bare, no GPU, no internet"
scripts/sglang-wheelhouse.sh 0.5.23 >/dev/null   # sglang + CPU torch + parser deps + the stand-in wheel
scripts/local-apt-repo.sh ninja-build numactl python3-apt nginx-light prometheus prometheus-blackbox-exporter >/dev/null
# Each host's SGLang venv (2.3 GB installed) goes to a disk directory, not the hosts'
# RAM overlay; emptied here so the runtime install is really shown.
rm -rf "$STATE_DIR/disk" && mkdir -p "$STATE_DIR/disk"
binds=(--bind "$PWD/.cache/wheelhouse:/srv/wheelhouse:ro"
       --bind "$PWD/.cache/sglang-wheelhouse-0.5.23-cpu:/srv/sglang-wheelhouse:ro"
       --bind "$PWD/.cache/apt-repo:/srv/apt-repo:ro"
       --bind "$PWD/.cache/apt-repo/sources.list:/etc/apt/sources.list:ro"
       --bind "$STATE_DIR/disk:/srv/ct200-disk")
tests/support/sandbox/sandbox.sh up "$HOSTS" ${CT200_DEMO_NAME:+--name "$CT200_DEMO_NAME"} "${binds[@]}"

run() { echo; echo "\$ $*"; "$@"; }

echo
echo "== 0. Preflight: one table for the fleet, before any weight byte (GPUs absent: the serving stand-in runs)"
# The token reaches Ansible as a 0600 file (as a vault would), never through the environment.
export CT200_HF_TOKEN_FILE=$STATE_DIR/hf_token
(umask 077; python -m localhub token granted > "$CT200_HF_TOKEN_FILE")
run ansible-playbook playbooks/preflight.yml -i inventories/sandbox -e "ct200_preflight_json=$STATE_DIR/preflight.json" \
  | sed -n '/one table for the fleet/,/PLAY RECAP/p'
echo "   JSON: $STATE_DIR/preflight.json"

echo
echo "== 1. Deploy with a token that was granted access to the gated drafter (installs the SGLang runtime first)"
run ansible-playbook deploy_kimi.yml -i inventories/sandbox --diff -e "ct200_preflight_json=$STATE_DIR/preflight.json" \
  | tee "$STATE_DIR/deploy.log" | grep -E -A3 'TASK .*(pip install SGLang|smoke completion|one table|client entry point)|PLAY RECAP' || true
grep -Eq 'failed=[1-9]|unreachable=[1-9]' "$STATE_DIR/deploy.log" && { echo "deploy failed (log: $STATE_DIR/deploy.log)"; exit 1; }

echo
echo "== 2. Re-run: nothing changes (idempotence)"
run ansible-playbook deploy_kimi.yml -i inventories/sandbox -e "ct200_preflight_json=$STATE_DIR/preflight.json" \
  | tee "$STATE_DIR/rerun.log" | tail -n 8
grep -Eq 'changed=[1-9]' "$STATE_DIR/rerun.log" && { echo "second run changed something"; exit 1; }

echo
echo "== 2b. Check mode predicts nothing to change"
run ansible-playbook deploy_kimi.yml -i inventories/sandbox --check -e "ct200_preflight_json=$STATE_DIR/preflight.json" | tee "$STATE_DIR/check.log" | tail -n 4
grep -Eq 'changed=[1-9]' "$STATE_DIR/check.log" && { echo "check mode predicted a change"; exit 1; }

echo
echo "== 3. Traffic and observability: the router, one ct200 status table, an alert on a planted bad drafter"
CT200_OBSERVE_RESTORE=0 scripts/demo-observe.sh

echo
echo "== 4. The field failure: a token whose user never requested the drafter (refused before it is installed)"
(umask 077; python -m localhub token never_requested > "$CT200_HF_TOKEN_FILE")
if run ansible-playbook playbooks/verify_access.yml -i inventories/sandbox; then
  echo "expected the access check to refuse the drafter"; exit 1
fi
echo
echo "demo: OK in $((SECONDS - demo_t0)) s (preflight table, runtime install, deploy through the router with a smoke"
echo "      completion, idempotent re-run, check mode, ct200 status, an alert on a bad drafter, refused token)"
