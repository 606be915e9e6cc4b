# SPDX-License-Identifier: Apache-2.0
"""Hub API calls of a no-op deploy do not depend on the fleet size (issue 9 item 3).

On the session's 3-host sandbox fleet (token_fleet: token-1..3, shared network namespace) the weights
and the token are put in place once; then the no-op deploy an operator runs is repeated on the 3 hosts while the local
Hub counts its API requests (/_admin/stats "api": whoami, model_info/revision, auth-check, tree,
paths-info, refs). With branch revisions the controller resolves each repository once: exactly 2 calls
for 2 repositories, all of them model_info. A call made per host would count 3 or more of its kind, so
no run on a 1-host view is needed to see that the count does not grow with the fleet (it was one more
deploy, about a fifth of this test). With the commits pinned in the inventory it makes none. Nothing is
fetched, so access is reported as "not needed".

What is counted: `deploy_kimi.yml --tags hf_token,hf_gated_access,model_weights`, i.e. the preflight
play (it carries every phase tag), the token and access play and the weights play. The SGLang
runtime and serving phases are left out to keep the test short; they make no Hub request.
"""

import json
import subprocess
from pathlib import Path

import pytest

from localhub.personas import token_for

from moleculerun import keep_output
from test_deploy_preflight import sandbox_env

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
HOSTS = ("token-1", "token-2", "token-3")  # the token_fleet fixture (conftest.py)
TAGS = ("--tags", "hf_token,hf_gated_access,model_weights")


def deploy(state, hub, tmp_path, *extra):
    report = tmp_path / "preflight.json"
    proc = subprocess.run(["ansible-playbook", "deploy_kimi.yml", "-i", "inventories/sandbox", *TAGS,
                           "-e", "ct200_preflight_json=%s" % report, *extra],
                          cwd=REPO, env=sandbox_env(state, hub, tmp_path), capture_output=True, text=True,
                          timeout=1200, check=False)
    out = proc.stdout + proc.stderr
    keep_output("hub_calls", out)
    assert token_for("granted") not in out
    return proc.returncode, out, (json.loads(report.read_text()) if report.exists() else None)


def recap(out):
    return {line.split()[0]: line for line in out.split("PLAY RECAP")[-1].splitlines() if line.startswith(HOSTS)}


def counted_noop(state, hub, tmp_path, hosts, *extra):
    (tmp_path / "preflight.json").unlink(missing_ok=True)
    hub.reset_stats()
    rc, out, report = deploy(state, hub, tmp_path, *extra)
    stats = hub.stats()
    assert rc == 0, out[-4000:]
    assert sorted(recap(out)) == sorted(hosts)
    assert all("changed=0" in line and "failed=0" in line for line in recap(out).values()), recap(out)
    assert stats["resolve"] == 0 and stats["cdn_get"] == 0, stats  # not a byte fetched
    assert sorted(row["host"] for row in report["hosts"]) == sorted(hosts) and report["ok"]
    for row in report["hosts"]:
        assert set(row["access"].values()) == {"not needed: nothing to fetch"}, row
    assert "access not needed: nothing to fetch" in out
    return stats["api"], {k: stats[k] for k in ("whoami", "model_info", "auth_check", "tree") if stats[k]}


def test_noop_deploy_hub_calls_do_not_grow_with_the_fleet(token_fleet, local_hub, tmp_path):
    # force: the token test on the same fleet (test_rotation.py) may have left another token there
    rc, out, report = deploy(token_fleet, local_hub, tmp_path, "-e", "hf_token_force=true")
    assert rc == 0, out[-4000:]
    assert local_hub.stats()["cdn_get"] > 0  # the first run fetched the weights
    commits = report["hosts"][0]["commits"]
    assert len(commits) == 2 and all(len(c) == 40 for c in commits.values())

    calls = counted_noop(token_fleet, local_hub, tmp_path, HOSTS)
    print("no-op deploy, branch revisions: Hub API calls", calls)
    # one revision -> commit per repository, and nothing else: a per-host call would count 3 or more
    assert calls == (2, {"model_info": 2}), calls

    pinned = ("-e", "ct200_target_revision=%s" % commits["moonshotai/Kimi-K2.6"],
              "-e", "ct200_draft_revision=%s" % commits["z-lab/Kimi-K2.6-DFlash"])
    # none on 3 hosts cannot grow with the fleet: the 1-host run would add nothing
    pinned_calls = counted_noop(token_fleet, local_hub, tmp_path, HOSTS, *pinned)
    print("no-op deploy, pinned commits: Hub API calls", pinned_calls)
    assert pinned_calls == (0, {}), pinned_calls
