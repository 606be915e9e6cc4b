# SPDX-License-Identifier: Apache-2.0
"""The site plan's decisions, one small named check each (plugins/module_utils/site_plan.py)."""

from __future__ import annotations

import json

import pytest

from ansible_collections.ct200.deploy.plugins.module_utils import site_plan as sp

GB = 10**9
GROUP = ["h3", "h1", "h2"]  # inventory order, deliberately not sorted
OK_ACCESS = {"auth": {"status": "ok", "user": "u", "fingerprint": "sha256:aaaaaaaaaaaa"}, "denied": [],
             "repos": [{"repo_id": "o/t", "access": "granted"}, {"repo_id": "o/d", "access": "granted"}]}
HUB = {"commits": {"o/t": "c" * 40, "o/d": "d" * 40}, "access": OK_ACCESS, "repos": ["o/t", "o/d"]}
RUNTIME = {"gpu_count": 8, "gpus": [{"name": "RTX", "memory_gib": 96}] * 8, "gpu_numa": [0] * 8, "numa_nodes": 1,
           "driver_version": "580.95.05", "cuda_driver_version": "13.0", "installed_version": "0.5.23",
           "pinned_version": "0.5.23", "installable": True, "dflash": True, "ddtree": None, "no_gpu_standin": False}


def plan(**lacks):
    return {"results": [{"item": {"name": n, "repo_id": "o/" + n[0], "local_dir": "/m/o/" + n[0]}, "commit": "c" * 40,
                         "bytes_to_download": b, "disk": {"needed_bytes": b}} for n, b in lacks.items()]}


def row(host, bytes_to_fetch=0, checks=()):
    return sp.host_row(host, RUNTIME, {"fingerprint": "sha256:aaaaaaaaaaaa"}, HUB, HUB["repos"],
                       plan(target=bytes_to_fetch), {"filesystems": [{"free_bytes": 2000 * GB}]},
                       {"fit": {"pool_tokens": 5, "context_length": 9}}, list(checks))


# ---- host order, seed, fan-out


@pytest.mark.parametrize("selected", [None, ["h2", "h3"], ["h2", "h3", "h2", "nobody"]])
def test_host_order_is_inventory_order_whatever_the_selection_order(selected):
    got = sp.host_order(GROUP, selected)
    assert got == [h for h in GROUP if selected is None or h in selected]


def test_seed_is_the_first_host_in_inventory_order_and_stable():
    seeds = {sp.site_layout(GROUP, sel)["seed"] for sel in (["h1", "h3"], ["h3", "h1"], {"h1", "h3"})}
    assert seeds == {"h3"}


def test_inventory_seed_wins_and_must_be_a_host_of_the_run():
    assert sp.site_layout(GROUP, None, seed="h2")["seed"] == "h2"
    with pytest.raises(sp.PlanError, match="fanout_seed 'h9' is not a host of the site"):
        sp.site_layout(GROUP, None, seed="h9")


@pytest.mark.parametrize("group,enabled,fanout", [
    (["a"], None, False), (["a", "b"], None, True), (["a", "b"], False, False), (["a", "b"], "false", False),
    (["a"], True, True), (["a", "b"], "yes", True)])
def test_fanout_decision(group, enabled, fanout):
    layout = sp.site_layout(group, None, enabled)
    assert layout["fanout"] is fanout
    assert layout["seed"] == (group[0] if fanout else None)


def test_a_kept_layout_loses_a_failed_seed_chosen_by_order_but_not_a_pinned_one():
    by_order = sp.site_layout(GROUP)
    assert sp.kept_layout(by_order, GROUP)["seed"] == "h3"
    assert sp.kept_layout(by_order, ["h1", "h2"])["seed"] == "h1"
    pinned = sp.site_layout(GROUP, seed="h3")
    with pytest.raises(sp.PlanError, match="fanout_seed 'h3' is not a host of this run"):
        sp.kept_layout(pinned, ["h1", "h2"])
    assert sp.kept_layout(sp.site_layout(GROUP, enabled=False), ["h1"])["fanout"] is False


SITE8 = ["n%d" % i for i in range(1, 9)]


def test_two_slices_of_an_eight_host_site_each_build_their_tree_inside_the_slice():
    """AWX job slicing (two ansible-playbook runs) or --limit: a tree must not have parents in the other run."""
    first, second = SITE8[:4], SITE8[4:]
    layouts = [sp.site_layout(SITE8, part) for part in (first, second)]
    assert [lay["hosts"] for lay in layouts] == [first, second]
    assert [lay["seed"] for lay in layouts] == ["n1", "n5"]
    assert all(lay["slice"] and lay["extra_hub_copies"] == 1 and lay["site_hosts"] == 8 for lay in layouts)
    # what the weights role computes from the preflight's layout, with the run's hosts as its group
    kept = [sp.kept_layout(lay, part) for lay, part in zip(layouts, (first, second))]
    assert [k["seed"] for k in kept] == ["n1", "n5"] and all(k["slice"] and k["extra_hub_copies"] == 1 for k in kept)
    # peers are the slice's own hosts: each slice's Hub copies add up to one per slice
    rows = [dict(sp.unreachable_row(h), reachable=True, hub_bytes=GB if h == lay["seed"] else 0,
                 peer_bytes=0 if h == lay["seed"] else GB) for lay in layouts for h in lay["hosts"]]
    hub_bytes = [sp.site_summary([r for r in rows if r["host"] in lay["hosts"]], lay)["hub_bytes"] for lay in layouts]
    assert hub_bytes == [GB, GB]
    line = sp.site_line(sp.site_summary(rows[:4], layouts[0]))
    assert "covers 4 of the site's 8 hosts" in line and "1 Hub copy more" in line


def test_the_slice_line_names_the_cost_and_a_whole_site_run_prints_none():
    part = sp.site_layout(SITE8, SITE8[4:])
    assert sp.slice_line(part) == ("this run covers 4 of the site's 8 hosts (a job slice or --limit): its fan-out tree "
                                   "stays inside the run, seeded by n5, and makes 1 Hub copy more than a run of the "
                                   "whole site")
    assert sp.slice_line(sp.site_layout(SITE8)) == ""
    # hosts that are no part of the group make no slice of it (a play over another group)
    other = sp.site_layout(SITE8, ["x1", "x2"])
    assert other["hosts"] == ["x1", "x2"] and not other["slice"] and sp.slice_line(other) == ""


def test_a_whole_site_run_is_no_slice_and_reports_no_extra_copy():
    layout = sp.site_layout(SITE8)
    assert not layout["slice"] and layout["extra_hub_copies"] == 0
    assert "Hub copy more" not in sp.site_line(sp.site_summary([], layout))


def test_a_pinned_seed_in_another_slice_gives_way_and_an_unknown_one_is_refused():
    assert sp.site_layout(SITE8, SITE8[4:], seed="n2")["seed"] == "n5"
    assert sp.site_layout(SITE8, SITE8[:4], seed="n2")["seed"] == "n2"
    with pytest.raises(sp.PlanError, match="'n9' is not a host of the site"):
        sp.site_layout(SITE8, SITE8[4:], seed="n9")


def test_degree_below_one_is_refused_with_the_fix():
    with pytest.raises(sp.PlanError, match="fanout_degree must be an integer >= 1"):
        sp.site_layout(GROUP, None, degree="0")


def test_source_is_hub_for_the_seed_and_without_fanout():
    on = sp.site_layout(GROUP)
    off = sp.site_layout(GROUP, enabled=False)
    assert [sp.source_of(on, h) for h in GROUP] == ["hub", "peers", "peers"]
    assert [sp.source_of(off, h) for h in GROUP] == ["hub"] * 3


# ---- token, fetch list, hub facts


def test_token_fingerprint_and_never_the_token():
    got = sp.token_status(" hf_secret\n")
    assert got == {"problem": None, "fingerprint": "sha256:" + __import__("hashlib").sha256(b"hf_secret").hexdigest()[:12]}
    assert "hf_secret" not in json.dumps(got)


def test_missing_vault_names_the_vault_file():
    assert "inventories/ct200/group_vars/ct200/vault.yml is missing" in sp.token_status(None, False, "/x/inventories/ct200")[
        "problem"]
    assert sp.token_status("  ", True)["problem"] == "no Hub token: ct200_hf_token is empty"


def probe(*complete):
    return {"results": [{"item": {"repo_id": r}, "planning": "manifest" if r in complete else "hub"} for r in ("o/t", "o/d")]}


C, D = "c" * 40, "d" * 40
ALONE = {"fanout": False, "hosts": ["h1", "h2"], "seed": None}


def test_fetch_list_in_repo_order_and_access_only_when_needed():
    tokens = {"h1": {"fingerprint": "sha256:x"}, "h2": {"fingerprint": "sha256:x"}}
    got = sp.fetch_plan(["o/t", "o/d"], ["h1", "h2"], {"h1": probe("o/t"), "h2": probe("o/t", "o/d")}, tokens,
                        "sha256:x", "/models", {"o/t": C, "o/d": D}, ALONE)
    assert got["fetch"] == ["o/d"] and got["prove_access"] is True
    assert got["list_repos"] == [{"repo_id": "o/d", "revision": D}]
    # without fan-out each host fetches the configs it lacks into its own snapshot of the resolved commit,
    # where its weights download finds them; a complete repository is read from its snapshot
    assert got["config_fetcher"] is None
    assert got["hosts"]["h1"]["config_fetch"] == ["o/d"] and got["hosts"]["h2"]["config_fetch"] == []
    assert got["hosts"]["h1"]["fit_host"] == "h1"
    assert got["hosts"]["h1"]["config_dirs"] == {"o/t": "/models/o/t/snapshots/" + C, "o/d": "/models/o/d/snapshots/" + D}
    done = sp.fetch_plan(["o/t", "o/d"], ["h2"], {"h2": probe("o/t", "o/d")}, tokens, "sha256:x", "/m")
    assert (done["fetch"], done["prove_access"]) == ([], False)
    other_token = sp.fetch_plan(["o/t"], ["h2"], {"h2": probe("o/t", "o/d")}, {"h2": {"fingerprint": "sha256:y"}},
                                "sha256:x", "/m")
    assert other_token["prove_access"] is True


def test_with_fan_out_only_the_seed_fetches_configs_and_the_others_fit_there():
    """One Hub copy of the config files for the site (issue 13: a commit that changes one small file costs that
    file's bytes): the seed fetches them into its snapshot, every host that lacks the commit is checked there."""
    layout = sp.site_layout(["h1", "h2", "h3"])
    probes = {"h3": probe("o/t")}
    got = sp.fetch_plan(["o/t"], ["h1", "h2", "h3"], probes, {}, "sha256:x", {"h1": "/m1", "h2": "/m2", "h3": "/m3"},
                        {"o/t": C}, layout)
    assert got["config_fetcher"] == "h1"
    assert [got["hosts"][h]["config_fetch"] for h in ("h1", "h2", "h3")] == [["o/t"], [], []]
    assert [got["hosts"][h]["fit_host"] for h in ("h1", "h2", "h3")] == ["h1", "h1", "h3"]
    # h2 reads the seed's snapshot; h3, which holds the commit, reads its own
    assert got["hosts"]["h2"]["config_dirs"] == {"o/t": "/m1/o/t/snapshots/" + C}
    assert got["hosts"]["h3"]["config_dirs"] == {"o/t": "/m3/o/t/snapshots/" + C}


def test_a_seed_that_holds_the_commit_fetches_nothing_and_serves_the_fit_checks():
    layout = sp.site_layout(["h1", "h2"])
    got = sp.fetch_plan(["o/t", "o/d"], ["h1", "h2"], {"h1": probe("o/t", "o/d"), "h2": probe("o/t")}, {}, "sha256:x",
                        "/m", {"o/t": C, "o/d": D}, layout)
    assert got["fetch"] == ["o/d"]
    assert got["hosts"]["h1"]["config_fetch"] == [] and got["hosts"]["h2"]["config_fetch"] == []
    assert got["hosts"]["h2"]["fit_host"] == "h1"
    assert got["hosts"]["h2"]["config_dirs"]["o/d"] == "/m/o/d/snapshots/" + D


def test_a_pinned_seed_fetches_and_a_seed_outside_the_run_gives_way_to_the_first_host():
    pinned = sp.fetch_plan(["o/t"], ["h1", "h2"], {}, {}, "sha256:x", "/m", {"o/t": C},
                           sp.site_layout(["h1", "h2"], seed="h2"))
    assert pinned["config_fetcher"] == "h2" and pinned["hosts"]["h1"]["fit_host"] == "h2"
    # the layout's seed failed before this task (it is not in the play's hosts any more)
    gone = sp.fetch_plan(["o/t"], ["h2", "h3"], {}, {}, "sha256:x", "/m", {"o/t": C}, sp.site_layout(["h1", "h2", "h3"]))
    assert gone["config_fetcher"] == "h2"
    assert gone["hosts"]["h2"]["config_fetch"] == ["o/t"] and gone["hosts"]["h3"]["config_fetch"] == []


def test_each_host_reads_configs_in_its_own_models_dir():
    """The stage runs once for the fleet: each host's models dir is its own, not the first host's."""
    got = sp.fetch_plan(["o/t", "o/d"], ["h1", "h2"], {"h1": probe("o/t"), "h2": probe("o/t")}, {}, "sha256:x",
                        {"h1": "/m1", "h2": "/m2/"}, {"o/t": C})
    assert got["hosts"]["h1"]["config_dirs"] == {"o/t": "/m1/o/t/snapshots/" + C, "o/d": "/m1/o/d"}
    assert got["hosts"]["h2"]["config_dirs"] == {"o/t": "/m2/o/t/snapshots/" + C, "o/d": "/m2/o/d"}


@pytest.mark.parametrize("models", [{"h1": "/m"}, {"h1": "/m", "h2": "models"}, {"h1": "/m", "h2": ""}])
def test_a_host_without_an_absolute_models_dir_is_refused_by_name(models):
    with pytest.raises(sp.PlanError) as err:
        sp.fetch_plan(["o/t"], ["h1", "h2"], {}, {}, "sha256:x", models)
    assert str(err.value).startswith("h2: ct200_models_dir is ") and "fix: set ct200_models_dir" in str(err.value)


def test_a_host_without_a_probe_lacks_everything():
    got = sp.fetch_plan(["o/t"], ["h1"], {}, {}, "sha256:x", "/m")
    assert got["hosts"]["h1"]["incomplete"] == ["o/t"] and got["hosts"]["h1"]["token_in_place"] is False


def test_hub_facts_access_not_needed_or_not_checked():
    skipped = {"skipped": True}
    assert sp.hub_facts({}, skipped, skipped, [], None)["access"]["not_needed"] is True
    assert sp.hub_facts({}, skipped, skipped, [], "no Hub token")["access"] == {"msg": "access not checked"}
    assert sp.hub_facts({"commits": {"o/t": "c"}}, OK_ACCESS, {"listings": {"o/t": []}}, ["o/t"], None)["plan_ready"]
    assert not sp.hub_facts({}, dict(OK_ACCESS, denied=["o/d"]), {}, ["o/t"], None)["plan_ready"]


def test_host_plan_needs_per_planned_repository():
    results = plan(target=5)["results"] + [{"skipped": True, "item": {"repo_id": "o/d"}}]
    results[0].update(files=3, files_to_download=1, bytes_total=7 * GB)
    got = sp.host_plan({"results": results})
    assert got["requirements"] == [{"label": "target o/t", "path": "/m/o/t", "bytes": 5, "reused_bytes": 0}]
    assert (got["planned"], got["to_download"]) == (["o/t"], ["target"])
    assert got["lines"] == ["target o/t@cccccccccccc: 1 of 3 files, 0.0 of 7.0 GB to fetch"]


# ---- failed checks: generic sources, cause and fix


def test_generic_check_lists_keep_only_the_failed_ones():
    fabric = [{"check": "nvlink", "ok": True, "value": "ok"},
              {"check": "xid", "ok": False, "value": 79, "cause": "GPU 3 fell off the bus (Xid 79)", "fix": "reseat"}]
    legacy = [{"check": "gpus", "cause": "4 GPU(s) found", "fix": "more GPUs"}]
    got = sp.failed_checks([("fabric", fabric), ("runtime", legacy)], None, HUB, 2, plan(), {}, {"fit": {}})
    assert got == [{"check": "xid", "cause": "GPU 3 fell off the bus (Xid 79)", "fix": "reseat"},
                   {"check": "gpus", "cause": "4 GPU(s) found", "fix": "more GPUs"}]


@pytest.mark.parametrize("token_problem,hub,check", [
    ("no Hub token: x", HUB, "token"),
    (None, dict(HUB, commits={}, resolve_msg="404"), "hub"),
    (None, dict(HUB, access={"msg": "access not checked"}), "access"),
    (None, dict(HUB, access=dict(OK_ACCESS, denied=["o/d"], msg="o/d: not_requested")), "access"),
])
def test_controller_verdicts_become_one_check(token_problem, hub, check):
    got = sp.failed_checks([], token_problem, hub, 2, plan(), {}, {"fit": {}})
    assert [c["check"] for c in got] == [check] and all(c["cause"] and c["fix"] for c in got)


def test_plan_disk_fit_failures_carry_cause_and_fix():
    failed_plan = {"results": [{"item": {"repo_id": "o/t"}, "failed": True, "msg": "403"}]}
    got = sp.failed_checks([], None, HUB, 2, failed_plan, {"failed": True, "msg": "need 9 GB more"},
                           {"failed": True, "msg": "KV pool too small"})
    assert [(c["check"], c["cause"]) for c in got] == [("plan", "o/t: 403"), ("disk", "need 9 GB more"),
                                                       ("fit", "KV pool too small")]


def test_fit_not_checked_is_a_failure_only_alone():
    assert [c["check"] for c in sp.failed_checks([], None, HUB, 2, plan(), {}, {"skipped": True})] == ["fit"]
    assert [c["check"] for c in sp.failed_checks([], "no token", HUB, 2, plan(), {}, {"skipped": True})] == ["token"]


# ---- rows, table, JSON


def test_report_bytes_per_host_by_source_and_site_totals():
    rows = [row("h3", 600 * GB), row("h1", 600 * GB), row("h2", 0)]
    got = sp.report(rows, sp.site_layout(GROUP))
    assert [(r["fetch_from"], r["hub_bytes"], r["peer_bytes"]) for r in got["rows"]] == [
        ("hub", 600 * GB, 0), ("peers", 0, 600 * GB), ("peers", 0, 0)]
    assert got["site"] == {"fanout": True, "seed": "h3", "hub_bytes": 600 * GB, "peer_bytes": 600 * GB, "hosts": 3,
                           "site_hosts": 3, "slice": False, "extra_hub_copies": 0}
    assert got["site_line"].startswith("fan-out: the seed h3 fetches 600.00 GB from the Hub, once for the site")


def test_unreachable_and_refused_rows_in_table_json_and_failure():
    rows = [row("h3", 1 * GB, [{"check": "gpus", "cause": "4 GPU(s) found", "fix": "more GPUs"}]), sp.unreachable_row("h1")]
    got = sp.report(rows, sp.site_layout(GROUP, enabled=False))
    assert got["table"][0] == sp.TABLE_HEADER
    assert got["table"][1] == ("h3 | 8 x RTX, 96 GiB, numa [0, 0, 0, 0, 0, 0, 0, 0] | 580.95.05/13.0 | 0.5.23/0.5.23 dflash | "
                               "u (sha256:aaaaaaaaaaaa) | o/t=granted, o/d=granted | 1.0 hub / 2000.0 | 5 @ 9 | none | REFUSED: gpus")
    assert got["table"][2] == "h1 | UNREACHABLE"
    document = json.loads(got["json"])
    assert document["ok"] is False and [h["host"] for h in document["hosts"]] == ["h3", "h1"]
    assert got["failure"] == ("preflight failed: h3: [gpus] 4 GPU(s) found; fix: more GPUs. "
                              "h1: [unreachable] h1 did not answer (or failed before its preflight finished); "
                              "fix: check the connection (ssh, ansible_host) and re-run.")


def test_report_json_is_the_document_with_one_line_per_host():
    rows = [row("h3", 1 * GB), sp.unreachable_row("h1"), row("h2")]
    got = sp.report(rows, sp.site_layout(GROUP))
    assert got["ok"] is False and json.loads(got["json"]) == {"hosts": got["rows"], "site": got["site"], "ok": False}
    lines = got["json"].splitlines()
    assert [json.loads(line.strip().rstrip(","))["host"] for line in lines if line.startswith("    {")] == ["h3", "h1", "h2"]
    assert json.loads(sp.report([], sp.site_layout(GROUP))["json"])["hosts"] == []


def test_all_passing_report_is_ok_without_failure():
    got = sp.report([row("h3")], sp.site_layout(["h3"]))
    assert got["ok"] is True and got["failure"] is None and got["table"][1].endswith("| OK")
    assert got["site_line"] == "no fan-out: every host fetches from the Hub, 0.00 GB in all"


# ---- fan-out


def test_peers_in_inventory_order_with_ipv6_brackets():
    got = sp.peer_list(["a", "b"], {"a": "10.0.0.1", "b": "fd00::2"}, {"a": 8790, "b": 9000}, "target")
    assert got == [{"name": "a", "url": "http://10.0.0.1:8790/target"}, {"name": "b", "url": "http://[fd00::2]:9000/target"}]


def test_fanout_result_seed_counts_hub_bytes_and_a_failed_job_is_not_verified():
    layout = sp.site_layout(["h0", "h1"])
    repos = [{"name": "target", "repo_id": "o/t"}, {"name": "drafter", "repo_id": "o/d"}]
    seed = sp.fanout_result("h0", layout, repos, [{"finished": 1, "bytes_downloaded": 7, "files": 2, "bytes_total": 7},
                                                  {"finished": 1, "bytes_downloaded": 0}])
    assert (seed["role"], seed["verified"], seed["repos"][0]["bytes_by_kind"]) == ("seed", True, {"hub": 7})
    peer = sp.fanout_result("h1", layout, repos, [{"finished": 1, "bytes_by_kind": {"parent": 7}, "fallbacks": [{}]},
                                                  {"finished": 1, "failed": True, "msg": "no source"}])
    assert (peer["role"], peer["verified"]) == ("peer", False)
    assert peer["repos"][0]["fallbacks"] == 1 and peer["repos"][1]["msg"] == "no source"


def test_a_fit_check_check_mode_could_not_run_is_noted_not_failed():
    """deploy --check on a bare host: the Hub client venv is not there yet, so no config was fetched."""
    assert sp.fit_checks({"skipped": True}, False, client_ready=False) == []
    assert sp.fit_checks({"skipped": True}, False)[0]["cause"].startswith("not checked")
    refused = {"failed": True, "msg": "context_length 262144 does not fit"}
    assert sp.fit_checks(refused, False, client_ready=False)[0]["cause"] == refused["msg"]
    pending = sp.host_row("h1", RUNTIME, {}, HUB, HUB["repos"], plan(), {}, {"skipped": True}, [], client_ready=False)
    assert pending["fit"] is None and pending["fit_note"] == sp.CLIENT_PENDING
    assert row("h1")["fit_note"] is None


def test_staged_repos_point_every_later_step_at_the_commits_snapshot():
    repos = [{"name": "target", "repo_id": "o/t", "local_dir": "/models/o/t/"},
             {"name": "drafter", "repo_id": "o/d", "local_dir": "/models/o/d"}]
    plans = [{"commit": "a" * 40, "item": repos[0]}, {"skipped": True}]
    listings = [{"commit": "b" * 40}, {"commit": "c" * 40}]
    got = sp.staged_repos(repos, plans, listings)
    assert got["dirs"] == {"target": "/models/o/t/snapshots/" + "a" * 40, "drafter": "/models/o/d/snapshots/" + "c" * 40}
    assert [r["root_dir"] for r in got["repos"]] == ["/models/o/t/", "/models/o/d"]
    assert got["create_dirs"][:3] == ["/models/o/t", "/models/o/t/snapshots", got["dirs"]["target"]]
    assert got["models"] == [{"name": "target", "path": got["dirs"]["target"]},
                             {"name": "drafter", "path": got["dirs"]["drafter"]}]
    with pytest.raises(sp.PlanError, match="commit of /models/o/d is unknown"):
        sp.staged_repos(repos, plans, [{}, {"commit": "not-a-commit"}])
    started = [{"results": [{"ansible_job_id": "j1", "item": {"item": repos[1]}}]}]
    jobs = sp.wait_jobs("h1", {"fanout": True, "seed": "h0"}, started, got["dirs"])
    assert jobs[0]["progress_file"] == got["dirs"]["drafter"] + "/.ct200/progress.json"


# ---- releases in the report (issue 13: status, the preflight report and --json show them per host)

RELEASES = {"state": {"current": "r111111111111", "previous": "r000000000000", "keep": 2},
            "current": {"id": "r111111111111", "target": {"repo_id": "o/t", "commit": "c" * 40, "dir": "/m/t"},
                        "drafter": {"repo_id": "o/d", "commit": "d" * 40, "dir": "/m/d"}, "sglang_version": "0.5.23"}}


def test_the_report_shows_each_hosts_current_and_previous_release():
    served = sp.host_row("h1", RUNTIME, {}, HUB, HUB["repos"], plan(), {}, {"fit": {}}, [], releases=RELEASES)
    bare = sp.host_row("h2", RUNTIME, {}, HUB, HUB["repos"], plan(), {}, {"fit": {}}, [],
                       releases={"state": {"current": None, "previous": None, "keep": 2}, "current": None})
    unread = sp.host_row("h3", RUNTIME, {}, HUB, HUB["repos"], plan(), {}, {"fit": {}}, [], releases={"skipped": True})
    assert served["release"] == {"current": "r111111111111", "previous": "r000000000000",
                                 "target": {"repo_id": "o/t", "commit": "c" * 40},
                                 "drafter": {"repo_id": "o/d", "commit": "d" * 40}, "sglang_version": "0.5.23"}
    assert bare["release"]["current"] is None and unread["release"] is None
    rep = sp.report([served, bare, unread], sp.site_layout(["h1", "h2", "h3"], None, False))
    assert "release (current / previous)" in rep["table"][0]
    cells = dict((line.split(" | ")[0], line.split(" | ")) for line in rep["table"][1:])
    assert cells["h1"][-2] == "r111111111111 / r000000000000"
    assert cells["h2"][-2] == "none" and cells["h3"][-2] == "none"
    assert json.loads(rep["json"])["hosts"][0]["release"]["current"] == "r111111111111"


WEIGHTS_REPOS = [{"name": "target", "repo_id": "o/t", "revision": "c" * 40, "local_dir": "/m/o/t", "listing": None},
                 {"name": "drafter", "repo_id": "o/d", "revision": "d" * 40, "local_dir": "/m/o/d", "listing": None}]


def complete_probe(**changes):
    results = [{"item": {"name": r["name"], "repo_id": r["repo_id"], "local_dir": r["local_dir"] + "/"},
                "commit": r["revision"], "planning": "manifest", "files": 3, "bytes_total": 9}  # no disk: no Hub asked
               for r in WEIGHTS_REPOS]
    for index, change in changes.items():
        results[int(index[1:])].update(change)
    return {"results": results, "changed": False}


def test_the_preflight_probe_stands_as_the_weights_plan_on_a_no_op():
    got = sp.known_plan(WEIGHTS_REPOS, [], complete_probe(), "sha256")
    assert [r["item"] for r in got["results"]] == WEIGHTS_REPOS  # the role's items, for its later tasks
    assert [r["commit"] for r in got["results"]] == ["c" * 40, "d" * 40]
    # what the role's later stages read from it: the snapshot dirs and nothing to fetch or to fit on the disk
    assert sp.staged_repos(WEIGHTS_REPOS, got["results"], [])["dirs"] == {
        "target": "/m/o/t/snapshots/" + "c" * 40, "drafter": "/m/o/d/snapshots/" + "d" * 40}
    assert sp.host_plan(got)["to_download"] == []


@pytest.mark.parametrize("fetch, probe, verify", [
    (["o/d"], complete_probe(), "sha256"),                        # some host lacks a repository: plan anew
    (None, complete_probe(), "sha256"),                           # no preflight decision
    ([], complete_probe(), "size"),                               # the role would verify otherwise than the probe
    ([], complete_probe(r1={"planning": "hub"}), "sha256"),       # not complete by the manifest
    ([], complete_probe(r1={"commit": "e" * 40}), "sha256"),      # another commit
    ([], complete_probe(r0={"failed": True}), "sha256"),          # the probe failed there
    ([], complete_probe(r0={"item": {"repo_id": "o/t", "local_dir": "/x/o/t"}}), "sha256"),  # another directory
    ([], {"results": complete_probe()["results"][:1]}, "sha256"),  # not every repository
    ([], {"skipped": True, "results": []}, "sha256"),             # the probe did not run
])
def test_the_role_plans_anew_unless_the_probe_is_its_plan(fetch, probe, verify):
    assert sp.known_plan(WEIGHTS_REPOS, fetch, probe, verify) is None


def test_file_patterns_make_the_role_plan_anew():
    repos = [dict(WEIGHTS_REPOS[0], allow_patterns=["*.json"]), WEIGHTS_REPOS[1]]
    assert sp.known_plan(repos, [], complete_probe(), "sha256") is None


def test_a_commit_that_is_no_40_hex_id_never_becomes_a_fit_check_path():
    """The resolved commit comes from the Hub: it names a directory only once it is 40 hex digits."""
    with pytest.raises(sp.PlanError) as err:
        sp.fetch_plan(["o/t"], ["h1"], {}, {}, "sha256:x", "/m", {"o/t": "../../etc"})
    assert "not a 40-hex commit" in str(err.value) and "re-run" in str(err.value)


def test_a_peer_whose_seed_could_not_fetch_the_configs_names_the_seed_and_its_cause():
    """With fan-out the seed fetches the configs and runs every fit check: a peer's row says where it failed."""
    fetch_plan = {"hosts": {"h0": {"fit_host": "h0"}, "h1": {"fit_host": "h0"}}}
    configs = {"h0": {"results": [{"item": {"repo_id": "z-lab/Kimi-K2.6-DFlash"}, "failed": True,
                                   "msg": "401 Unauthorized"}]},
               "h1": {"results": [{"skipped": True}]}}
    source = sp.fit_source("h1", fetch_plan, configs)
    assert source == ("h0", "z-lab/Kimi-K2.6-DFlash: 401 Unauthorized")
    [check] = sp.failed_checks([], None, HUB, len(HUB["repos"]), plan(), {}, {"skipped": True}, True, source)
    assert check["check"] == "fit"
    assert check["cause"] == ("not checked: the model configs could not be fetched on h0 "
                              "(z-lab/Kimi-K2.6-DFlash: 401 Unauthorized)")
    assert "h0" in check["fix"]
    # a site of one (no fetch plan entry): the host itself, and no failure to quote when its fetch did not fail
    assert sp.fit_source("h2", {}, {}) == ("h2", None)
    assert sp.fit_source("h0", fetch_plan, {"h0": {"results": [{"commit": "a" * 40}]}}) == ("h0", None)


def test_the_fit_check_runs_only_when_every_commit_resolved_and_its_configs_were_fetched():
    repos = [{"repo_id": "o/t"}, {"repo_id": "z/d"}]
    commits = {"o/t": "a" * 40, "z/d": "b" * 40}
    fetched = {"results": [{"item": {"repo_id": "o/t"}, "commit": "a" * 40, "failed": False},
                           {"item": {"repo_id": "z/d"}, "commit": "b" * 40, "failed": False}]}
    assert sp.fit_ready(commits, repos, fetched, ["o/t", "z/d"])
    assert sp.fit_ready(commits, repos, {}, [])                      # nothing to fetch: the host has both
    assert not sp.fit_ready({"o/t": "a" * 40}, repos, fetched, [])   # a commit that did not resolve
    # the drafter's fetch was refused (401): no commit in its result, and a skipped item is no fetch either
    refused = {"results": [fetched["results"][0], {"item": {"repo_id": "z/d"}, "msg": "401 Unauthorized"}]}
    assert not sp.fit_ready(commits, repos, refused, ["o/t", "z/d"])
    skipped = {"results": [fetched["results"][0], {"item": {"repo_id": "z/d"}, "skipped": True}]}
    assert not sp.fit_ready(commits, repos, skipped, ["o/t", "z/d"])
    # the old count comparison took any two results with a commit: the same repository twice is not both
    twice = {"results": [fetched["results"][0], fetched["results"][0]]}
    assert not sp.fit_ready(commits, repos, twice, ["o/t", "z/d"])
    assert not sp.fit_ready(commits, repos, None, ["o/t"])
    from ansible_collections.ct200.deploy.plugins.filter.site import FilterModule
    assert FilterModule().filters()["preflight_fit_ready"](commits, repos, fetched, ["o/t", "z/d"]) is True
