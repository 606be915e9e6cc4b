#!/usr/bin/env bash
# The main job on the embedded default: a local Hub (Kimi-K2.6-shaped public target,
# gated DFlash drafter) and a sandbox fleet of real systemd hosts, deployed with
# exactly the playbook operators run against inventories/ct200. No GPU: the SGLang
# process on the hosts is the test stand-in that validates its argv with SGLang's parser.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck disable=SC1091
. .venv/bin/activate
export ANSIBLE_CONFIG="$PWD/ansible.cfg"
HOSTS=${CT200_DEMO_HOSTS:-2}
STATE_DIR=$PWD/.cache/demo
HUB_STATE=$STATE_DIR/localhub.json
mkdir -p "$STATE_DIR"
rm -f "$HUB_STATE"

hub_pid=""
cleanup() {
  scripts/sandbox.sh down >/dev/null 2>&1 || true
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

echo "== sandbox fleet ($HOSTS hosts)"
binds=(--bind "$PWD/.cache/wheelhouse:/srv/wheelhouse:ro"
       --bind "$PWD/.cache/sglang-venv-0.5.23:/opt/ct200-sglang-venv:ro"  # fixed path: units use PrivateTmp
       --bind "$PWD/tools/sglang_standin:/opt/ct200-standin:ro")
scripts/sandbox.sh up "$HOSTS" "${binds[@]}"

run() { echo; echo "\$ $*"; "$@"; }

echo
echo "== 1. Deploy with a token that was granted access to the gated drafter"
# The token reaches Ansible as a 0600 file (as a vault would), never through the environment.
export CT200_HF_TOKEN_FILE=$STATE_DIR/hf_token
(umask 077; python -m localhub token granted > "$CT200_HF_TOKEN_FILE")
run ansible-playbook deploy_kimi.yml -i inventories/sandbox --diff

echo
echo "== 2. Re-run: nothing changes (idempotence)"
run ansible-playbook deploy_kimi.yml -i inventories/sandbox | tee "$STATE_DIR/rerun.log" | tail -n 8
grep -Eq 'changed=[1-9]' "$STATE_DIR/rerun.log" && { echo "second run changed something"; exit 1; }

echo
echo "== 2b. Check mode predicts nothing to change"
run ansible-playbook deploy_kimi.yml -i inventories/sandbox --check | tee "$STATE_DIR/check.log" | tail -n 4
grep -Eq 'changed=[1-9]' "$STATE_DIR/check.log" && { echo "check mode predicted a change"; exit 1; }

echo
echo "== 3. The field failure: a token whose user never requested the drafter (refused before it is installed)"
(umask 077; python -m localhub token never_requested > "$CT200_HF_TOKEN_FILE")
if run ansible-playbook playbooks/verify_access.yml -i inventories/sandbox; then
  echo "expected the access check to refuse the drafter"; exit 1
fi
echo
echo "demo: OK (deploy, idempotent re-run, check mode, and a refused token explained above)"
