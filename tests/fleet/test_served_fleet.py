# SPDX-License-Identifier: Apache-2.0
"""The served fleet (tests/fleet/conftest.py: served_fleet): one full deploy_kimi.yml over SSH leaves
every host serving its instance, each with the shared per-version SGLang venv the role installed once, and the
release it serves recorded with its decode throughput (the next rollout's baseline).

The release records are the ones the deploy left (``served_fleet.deployed_releases``, read right after it): the
rollout scenarios on the same fleet (test_fleet_rollout.py, which runs first in a directory run) move every host
to later releases, so the files on the hosts no longer show the deploy's own record by the time this test runs."""
import json


def test_every_host_serves_after_one_full_deploy(served_fleet):
    for host in served_fleet.hosts:
        url = served_fleet.base_url(host)
        res = served_fleet.session.exec(host, f"curl -s -o /dev/null -w '%{{http_code}}' {url}/health_generate")
        assert res.stdout.strip() == "200", (host, res.stdout, res.stderr)
        info = served_fleet.session.exec(host, f"curl -s {url}/server_info")
        assert str(json.loads(info.stdout)["speculative_algorithm"]).upper() == "DFLASH", host
        active = served_fleet.session.exec(host, "systemctl is-active sglang@kimi.service")
        assert active.stdout.strip() == "active", host
        deployed = served_fleet.deployed_releases[host]
        st, record = deployed["state"], deployed["record"]
        assert st.get("current") and st["previous"] is None, (host, st)
        assert record["measured"]["decode_tok_s"] > 30, (host, st, record["measured"])
