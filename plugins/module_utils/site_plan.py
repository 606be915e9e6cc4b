# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""The site plan: every fleet decision of the preflight and the weights fan-out, in one place.

PRIVATE to the ct200.deploy collection.  Standard library only; the ``ct200.deploy.site_plan``
action calls it on the controller with the hosts' registered results and the controller's Hub
metadata, and nothing in YAML decides again.  One function per question:

* ``site_layout``: host order (inventory order, never a set), whether to fan out, the seed;
* ``token_status``: is the inventory's token usable (the cause and fix when not), its fingerprint;
* ``fetch_plan``: what each host lacks, what the fleet fetches, whether access must be proven;
* ``hub_facts``: the commits, listings and access verdict the later plays use;
* ``host_row`` / ``failed_checks``: one report row per host, failed checks from any number of
  generic check lists (``{check, ok, value, cause, fix}``; ``ok`` absent means failed);
* ``report``: rows with their source and bytes, the site's Hub and peer bytes, the table, the JSON
  and the failure message;
* ``peer_list`` / ``fanout_result``: the fan-out's peers and the per-host result ``ct200 deploy`` shows.
"""

from __future__ import annotations

import json
import re

from ansible_collections.ct200.deploy.plugins.module_utils.hf_auth import fingerprint

GB = 1e9
TABLE_HEADER = ("host | gpus (model, GiB, numa) | driver/cuda | sglang (installed/pinned, dialect) | token user (fingerprint)"
                " | access | fetch GB (from hub/peers) / free GB | fit (pool tokens @ context) | release (current / previous)"
                " | verdict")
UNREACHABLE_FIX = "check the connection (ssh, ansible_host) and re-run"
VAULT_FIX = "create and encrypt the vault (README: Vault)"
NOT_NEEDED = "not needed: nothing to fetch"


STAGES = ["site", "token", "fetch", "hub", "host_plan", "known_plan", "staged", "report", "jobs", "outcome", "fanout_result"]

# the options of the ct200.deploy.site_plan action (its module stub declares exactly these)
ARGUMENT_SPEC = dict(
    stage=dict(type="str", required=True, choices=STAGES),
    token=dict(type="str", no_log=True),
    vault_defined=dict(type="bool", default=True),
    inventory_dir=dict(type="str"),
    repos=dict(type="list", elements="raw"),
    hosts=dict(type="list", elements="str"),
    group=dict(type="list", elements="str"),
    host_vars=dict(type="dict"),
    host_checks=dict(type="list", elements="str"),
    done=dict(type="str", default="ct200_preflight_fit"),
    fingerprint=dict(type="str"),
    commits=dict(type="dict"),
    models_dir=dict(type="str"),
    resolved=dict(type="dict"),
    access=dict(type="dict"),
    listed=dict(type="dict"),
    fetch=dict(type="list", elements="str"),
    listings=dict(type="list", elements="dict"),
    token_problem=dict(type="str", no_log=False),  # a message, not a secret
    plan=dict(type="dict"),
    enabled=dict(type="raw"),
    seed=dict(type="str"),
    degree=dict(type="raw", default=2),
    layout=dict(type="dict"),
    plans=dict(type="list", elements="dict"),
    started=dict(type="list", elements="dict"),
    finished=dict(type="list", elements="dict"),
    port=dict(type="int", default=8790),
    dirs=dict(type="dict"),
    verify=dict(type="str"),
)


class PlanError(ValueError):
    """A setting that makes no site plan: one message with the cause and the fix."""


def _truthy(value) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on", "y")
    return bool(value)


def host_order(group, selected=None):
    """The hosts of ``group`` that are ``selected`` (the --limit), in inventory order, each once."""
    chosen = None if selected is None else set(selected)
    seen, out = set(), []
    for host in group or []:
        if host not in seen and (chosen is None or host in chosen):
            seen.add(host)
            out.append(host)
    return out


def site_layout(group, selected=None, enabled=None, seed=None, degree=2):
    """{hosts, fanout, seed, pinned, degree, site_hosts, slice, extra_hub_copies}: fan out when ``enabled``
    (default: the group has more than one host); the seed is ``seed`` (the inventory's fanout_seed: pinned)
    or the first host in inventory order.

    A run that covers only part of the site (an AWX job slice, a --limit) builds its tree inside the run:
    peers in another slice are another ansible-playbook run whose servers may not be up. The slice then has
    its own seed and makes one more Hub copy than a run of the whole site, which the report says
    (extra_hub_copies). A pinned seed in another slice gives way to the slice's first host for the same
    reason; a pinned seed that is no host of the site at all is refused."""
    if selected is not None and not set(selected) <= set(group or []):
        group = list(selected)  # the play's hosts are not (all) of this group: no site to be a slice of
    hosts = host_order(group, selected)
    site_hosts = len(host_order(group))
    fanout = _truthy(enabled) if enabled is not None else site_hosts > 1
    try:
        degree = int(degree)
    except (TypeError, ValueError):
        degree = 0
    if degree < 1:
        raise PlanError("fanout_degree must be an integer >= 1 (1 = chain), got %r; fix the inventory or the -e value"
                        % (degree,))
    pinned = seed not in (None, "")
    is_slice = 0 < len(hosts) < site_hosts
    base = {"hosts": hosts, "pinned": pinned, "degree": degree, "site_hosts": site_hosts, "slice": is_slice}
    if not fanout or not hosts:
        return dict(base, fanout=bool(fanout and hosts), seed=None, extra_hub_copies=0)
    if pinned and seed not in hosts and seed not in (group or []):
        raise PlanError("fanout_seed %r is not a host of the site (%s); name one of them in the inventory or -e"
                        % (seed, ", ".join(host_order(group))))
    chosen = seed if pinned and seed in hosts else hosts[0]
    return dict(base, fanout=True, seed=chosen, extra_hub_copies=1 if is_slice else 0)


def kept_layout(given, group, selected=None):
    """A layout decided earlier in the run (the preflight's), for the hosts still in it: the same switch,
    degree and seed; a seed chosen by order that has since failed gives way to the next host in
    inventory order, a pinned one (fanout_seed) is refused as before. Whether the run is a slice of
    the site was decided there too (this play's group holds the run's hosts only)."""
    hosts = host_order(group, selected)
    seed = given.get("seed") if given.get("pinned") or given.get("seed") in hosts else None
    if given.get("pinned") and seed not in hosts:
        raise PlanError("fanout_seed %r is not a host of this run (%s); name one of them in the inventory or -e"
                        % (seed, ", ".join(hosts)))
    layout = site_layout(group, selected, given.get("fanout"), seed, given.get("degree") or 2)
    if given.get("slice"):
        layout.update(site_hosts=given.get("site_hosts", layout["site_hosts"]), slice=True,
                      extra_hub_copies=1 if layout["fanout"] else 0)
    return layout


def fans_out_now(layout, fetch=None):
    """Fan out in this run: the layout says so and some host lacks something (``fetch``: the preflight's
    fetch list; None when unknown, for example without the preflight). Nothing to fetch: no server starts."""
    return bool(layout.get("fanout")) and (fetch is None or len(fetch) > 0)


def source_of(layout, host):
    """'hub' for the seed and for every host without fan-out, else 'peers'."""
    return "hub" if not layout["fanout"] or host == layout["seed"] else "peers"


def token_status(token, vault_defined=True, inventory_dir=""):
    """{problem, fingerprint}: problem is None for a usable token (never returned itself)."""
    if token is not None and str(token).strip():
        return {"problem": None, "fingerprint": fingerprint(str(token).strip())}
    if not vault_defined:
        where = "inventories/%s/group_vars/ct200/vault.yml" % (inventory_dir.rstrip("/").rsplit("/", 1)[-1] or "?")
        problem = ("no Hub token: vault_hf_token is not defined -- %s is missing or not decrypted (create it from "
                   "vault.yml.example, ansible-vault encrypt it, run with --ask-vault-pass or --vault-password-file FILE)"
                   % where)
    else:
        problem = "no Hub token: ct200_hf_token is empty"
    return {"problem": problem, "fingerprint": None}


def complete_repos(probe):
    """Repositories a host's offline manifest probe (hf_download check mode, a loop) found complete."""
    return [r.get("item", {}).get("repo_id") for r in (probe or {}).get("results") or []
            if isinstance(r, dict) and r.get("planning") == "manifest"]


def known_plan(repos, fetch, probe, verify):
    """The preflight's offline probe of this host (hf_download check mode over the same repositories) as its weights
    plan, instead of a second probe, when it is one: the site fetches nothing (``fetch`` empty: every host's probe
    found every repository complete at its resolved commit), the plan would verify as the probe did (sha256), and
    the probe covers exactly ``repos`` (same repo_id, local_dir and commit, in order, no file patterns). Else None:
    the role plans anew."""
    if fetch is None or list(fetch) or verify not in ("sha256", "full") or not isinstance(probe, dict):
        return None
    results = [r for r in probe.get("results") or [] if isinstance(r, dict)]
    if not repos or len(results) != len(repos):
        return None
    for repo, result in zip(repos, results):
        item = result.get("item") if isinstance(result.get("item"), dict) else {}
        same = (item.get("repo_id") == repo.get("repo_id")
                and str(item.get("local_dir") or "").rstrip("/") == str(repo.get("local_dir") or "").rstrip("/")
                and result.get("commit") == repo.get("revision") and not repo.get("allow_patterns")
                and not repo.get("ignore_patterns"))
        if not same or result.get("planning") != "manifest" or result.get("failed"):
            return None
    return {"results": [dict(result, item=repo) for repo, result in zip(repos, results)], "reused": "preflight"}


def host_dir(dirs, host, name):
    """The host's own directory: ``dirs`` is one path for every host or {host: path} (its host var, None when
    unset). The stage runs once for the fleet, so a path read from one host would be wrong for another."""
    value = dirs.get(host) if isinstance(dirs, dict) else dirs
    if not isinstance(value, str) or not value.startswith("/"):
        raise PlanError("%s: %s is %r, not an absolute path; fix: set %s to an absolute directory in the inventory"
                        % (host, name, value, name))
    return value.rstrip("/") or "/"


def config_fetcher(layout, hosts):
    """The one host that fetches the config files of a commit it lacks for the fit check when the site fans out:
    the seed (its weights download then reuses them), or the first host of the run when the seed is not in it.
    None without fan-out: every host fetches from the Hub anyway, each into its own snapshot."""
    if not (layout or {}).get("fanout"):
        return None
    if layout.get("seed") in hosts:
        return layout["seed"]
    return next((h for h in layout.get("hosts") or [] if h in hosts), hosts[0] if hosts else None)


def fetch_plan(repo_ids, hosts, probes, token_queries, expected_fingerprint, models_dir, commits=None, layout=None):
    """Per host what it lacks, which configs it fetches for the fit check (``config_fetch``) and where that check
    runs (``fit_host``) and reads them (``config_dirs``, in the fit host's ``models_dir``: one path or {host: path});
    the fleet's fetch list (in repo order) and the trees to list for it (at the resolved commits); whether access
    must be proven (something to fetch, or a host without the inventory token).

    Configs go into the snapshot of the resolved commit, where the weights download finds them verified and does
    not fetch them again. With fan-out only the config fetcher asks the Hub for them: a host that lacks a
    repository runs its fit check there (the configs are the same; its own GPU facts are the module's options),
    so the preflight costs one Hub copy of the config files for the site, not one per host."""
    commits = commits or {}
    fetcher = config_fetcher(layout, hosts)
    incomplete = dict((h, [r for r in repo_ids if r not in complete_repos(probes.get(h))]) for h in hosts)
    models = dict((h, host_dir(models_dir, h, "ct200_models_dir")) for h in hosts)

    def snapshot(host, repo_id):  # a repository is read from its snapshot of the resolved commit
        root = "%s/%s" % (models[host], repo_id)
        return snapshot_path(root, commits[repo_id]) if commits.get(repo_id) else root

    per_host = {}
    for host in hosts:
        fit_host = host if fetcher is None or not incomplete[host] else fetcher
        held = (token_queries.get(host) or {}).get("fingerprint")
        per_host[host] = {
            "incomplete": incomplete[host],
            "token_in_place": held is not None and held == expected_fingerprint,
            "fit_host": fit_host,
            "config_fetch": _configs_to_fetch(host, fetcher, incomplete),
            "config_dirs": dict((r, snapshot(fit_host, r)) for r in repo_ids)}
    lacking = set(r for h in hosts for r in incomplete[h])
    fetch = [r for r in repo_ids if r in lacking]
    in_place = all(h["token_in_place"] for h in per_host.values())
    return {"hosts": per_host, "fetch": fetch, "prove_access": bool(fetch) or not in_place, "config_fetcher": fetcher,
            "list_repos": [{"repo_id": r, "revision": commits[r]} for r in fetch if r in commits]}


def _configs_to_fetch(host, fetcher, incomplete):
    """Without fan-out a host fetches the configs of what it lacks; with it only the fetcher does, for what it
    lacks itself: every fit check runs on it, and a repository it holds is read from its complete snapshot."""
    if fetcher is not None and host != fetcher:
        return []
    return list(incomplete[host])


def _ran(result):
    return isinstance(result, dict) and bool(result) and not result.get("skipped")


def access_verdict(access, token_problem):
    """The controller's access proof, or why there is none."""
    if _ran(access):
        return access
    if token_problem is None:
        return {"not_needed": True, "msg": NOT_NEEDED,
                "summary": ["access not needed: nothing to fetch, every host holds the inventory token (fingerprint) "
                            "and complete weights at the resolved commits"]}
    return {"msg": "access not checked"}


def access_granted(access):
    return isinstance(access.get("auth"), dict) and bool(access["auth"]) and not access.get("denied")


def hub_facts(resolved, access, listed, fetch, token_problem, repo_ids=()):
    """What the later plays read (fact ct200_hub): commits, listings, the fetch list and the access verdict;
    ``plan_ready``: access proven, so the hosts may plan their downloads with the token."""
    verdict = access_verdict(access, token_problem)
    return {"commits": dict((resolved or {}).get("commits") or {}), "listings": dict((listed or {}).get("listings") or {}),
            "fetch": list(fetch or []), "access": verdict, "plan_ready": access_granted(verdict),
            "resolve_msg": (resolved or {}).get("msg"), "repos": list(repo_ids)}


def _gb2(count):
    return str(round(int(count or 0) / GB, 2))


def _plan_line(r):
    item = r.get("item") or {}
    return "%s %s@%s: %s of %s files, %s of %s GB to fetch" % (
        item.get("name"), item.get("repo_id"), str(r.get("commit") or "?")[:12], r.get("files_to_download") or 0,
        r.get("files"), _gb2(r.get("bytes_to_download")), _gb2(r.get("bytes_total")))


def host_plan(plan):
    """From a host's download plan (hf_download check mode, a loop): the bytes each repository still
    needs on its filesystem (ct200.deploy.disk_space requirements), the repositories planned, those
    with files to download, and one line per repository."""
    results = [r for r in (plan or {}).get("results") or [] if isinstance(r, dict) and not r.get("skipped")]
    requirements = []
    for r in results:
        if not isinstance(r.get("disk"), dict):
            continue
        item = r.get("item") or {}
        label = " ".join(str(x) for x in (item.get("name"), item.get("repo_id")) if x)
        requirements.append({"label": label, "path": item.get("local_dir"), "bytes": int(r["disk"].get("needed_bytes") or 0),
                             "reused_bytes": int(r["disk"].get("reused_bytes") or 0)})
    planned = [r for r in results if r.get("commit")]
    return {"requirements": requirements, "planned": [(r.get("item") or {}).get("repo_id") for r in planned],
            "to_download": [(r.get("item") or {}).get("name") for r in planned
                            if int(r.get("files_to_download") or 0) + int(r.get("files_to_link") or 0) > 0],
            "lines": [_plan_line(r) for r in planned]}


# ---- failed checks: every source is a list of {check, ok, value, cause, fix}


def as_checks(items, source="?"):
    """A generic check list (host_facts, sglang_runtime, any later fact source) as failed checks only:
    an item with ``ok`` true passed; without ``ok`` it is a failure (the {check, cause, fix} form)."""
    out = []
    for item in items or []:
        if not isinstance(item, dict) or item.get("ok") is True:
            continue
        out.append({"check": str(item.get("check") or source), "cause": str(item.get("cause") or "failed"),
                    "fix": str(item.get("fix") or "see the cause")})
    return out


def hub_checks(token_problem, hub, repo_count):
    """The controller's verdicts as checks: token, revisions, access (the first that failed)."""
    if token_problem is not None:
        return [{"check": "token", "cause": token_problem, "fix": VAULT_FIX}]
    if len(hub.get("commits") or {}) < repo_count:
        return [{"check": "hub", "cause": "revisions not resolved to commits: %s" % (hub.get("resolve_msg") or "?"),
                 "fix": "check ct200_hf_endpoint, the token and the revisions"}]
    access = hub.get("access") or {}
    if access.get("not_needed"):
        return []
    if not isinstance(access.get("auth"), dict) or not access["auth"]:
        return [{"check": "access", "cause": access.get("msg") or "access not checked", "fix": "see the cause"}]
    if access.get("denied"):
        return [{"check": "access", "cause": access.get("msg") or "denied", "fix": "see the verdict per repository"}]
    return []


def plan_checks(plan):
    return [{"check": "plan", "cause": "%s: %s" % ((r.get("item") or {}).get("repo_id"), r.get("msg") or "?"),
             "fix": "see the cause"}
            for r in (plan or {}).get("results") or [] if isinstance(r, dict) and r.get("failed")]


def disk_checks(disk):
    if isinstance(disk, dict) and disk.get("failed"):
        return [{"check": "disk", "cause": disk.get("msg") or "?", "fix": "free space or move ct200_models_dir"}]
    return []


# check mode on a bare host: the Hub client venv is not installed, so no config can be fetched to check
CLIENT_PENDING = "not checked in check mode: the Hub client the fit check reads configs with is installed by the real run"


def config_fetch_failure(configs):
    """'<repo>: <message>' of the first config fetch that failed (the registered loop of the fit host), or None."""
    for result in (configs or {}).get("results") or []:
        if isinstance(result, dict) and result.get("failed"):
            return "%s: %s" % ((result.get("item") or {}).get("repo_id"), result.get("msg") or "?")
    return None


def fit_checks(fit, earlier_failed, client_ready=True, fit_host=None, fetch_failure=None):
    """The fit check's refusal; a fit check that could not run is a failure only when nothing else failed,
    and never when the reason is check mode on a host whose Hub client the real run would install.
    FIT_HOST is where the configs were fetched and the check runs (the seed, for a peer of a fan-out site),
    FETCH_FAILURE what its config fetch said: a peer's row names the seed, not only "could not"."""
    if isinstance(fit, dict) and fit.get("failed"):
        return [{"check": "fit", "cause": fit.get("msg") or "?",
                 "fix": "see the cause (context_length, kv_cache_dtype, mem_fraction_static, tp)"}]
    if not _ran(fit) and not earlier_failed and client_ready:
        where = " on %s" % fit_host if fit_host else ""
        cause = "not checked: the model configs could not be fetched%s" % where
        cause += " (%s)" % fetch_failure if fetch_failure else ""
        fix = "see the cause; %s fetches the configs of the site's fit checks" % fit_host if fit_host else "see the earlier tasks"
        return [{"check": "fit", "cause": cause, "fix": fix}]
    return []


def failed_checks(check_lists, token_problem, hub, repo_count, plan, disk, fit, client_ready=True, fit_source=None):
    """All failed checks of one host, in the report's order: the hosts' own check lists, the controller's
    Hub verdicts, the download plan, the disk, the fit. FIT_SOURCE: (fit host, its config fetch failure)."""
    out = []
    for source, items in check_lists:
        out.extend(as_checks(items, source))
    out.extend(hub_checks(token_problem, hub, repo_count))
    out.extend(plan_checks(plan))
    out.extend(disk_checks(disk))
    fit_host, fetch_failure = fit_source or (None, None)
    out.extend(fit_checks(fit, bool(out), client_ready, fit_host, fetch_failure))
    return out


def fit_source(host, fetch_plan, configs_by_host):
    """(the host that fetched HOST's configs and ran its fit check, what its config fetch said) from the
    fetch stage's plan (``hosts[host].fit_host``) and each host's registered config fetch."""
    fit_host = (((fetch_plan or {}).get("hosts") or {}).get(host) or {}).get("fit_host") or host
    return fit_host, config_fetch_failure((configs_by_host or {}).get(fit_host))


def fit_ready(commits, repos, configs, config_fetch):
    """Whether a host's fit check can run: the commit of every repository of the run resolved, and the fit
    host's config fetch (its registered loop) fetched each repository it was to fetch (``config_fetch``).
    Else the check is skipped and the report says why (``fit_checks``)."""
    resolved = commits or {}
    if any(repo.get("repo_id") not in resolved for repo in repos or []):
        return False
    fetched = set(_fetched_configs(configs))
    return all(repo_id in fetched for repo_id in config_fetch or [])


def _fetched_configs(configs):
    """Repository ids whose config fetch ran and verified (a result carries the commit it fetched)."""
    for result in (configs or {}).get("results") or []:
        if isinstance(result, dict) and result.get("commit") and not result.get("failed"):
            yield (result.get("item") or {}).get("repo_id")


# ---- rows, table, JSON


def _first(values, default=None):
    for value in values:
        return value
    return default


def _access_map(access, repo_ids):
    if access.get("not_needed"):
        return dict((r, NOT_NEEDED) for r in repo_ids)
    return dict((r.get("repo_id"), r.get("access")) for r in access.get("repos") or [] if isinstance(r, dict))


def release_cell(releases):
    """{"current", "previous", and what the current one serves} from ``sglang_release state=read`` (None
    when the host has no record or the read did not run)."""
    if not isinstance(releases, dict) or not isinstance(releases.get("state"), dict):
        return None
    current = releases.get("current") if isinstance(releases.get("current"), dict) else {}
    state = releases["state"]
    return {"current": state.get("current"), "previous": state.get("previous"),
            "target": _repo_commit(current.get("target")), "drafter": _repo_commit(current.get("drafter")),
            "sglang_version": current.get("sglang_version")}


def _repo_commit(served):
    return dict((k, served.get(k)) for k in ("repo_id", "commit")) if isinstance(served, dict) else None


def _release_text(release):
    if not release or not release.get("current"):
        return "none"
    return "%s / %s" % (release["current"], release.get("previous") or "-")


def host_row(host, runtime, token_query, hub, repo_ids, plan, disk, fit, checks, client_ready=True, releases=None):
    """One reachable host's report row."""
    runtime = runtime or {}
    gpus = runtime.get("gpus") or []
    access = hub.get("access") or {}
    auth = access.get("auth") if isinstance(access.get("auth"), dict) else {}
    plan_results = [r for r in (plan or {}).get("results") or [] if isinstance(r, dict)]
    return {
        "host": host, "reachable": True,
        "gpus": {"count": runtime.get("gpu_count"), "model": list(dict.fromkeys(g.get("name") for g in gpus)),
                 "memory_gib": _first(g.get("memory_gib") for g in gpus), "numa": runtime.get("gpu_numa"),
                 "numa_nodes": runtime.get("numa_nodes"), "driver": runtime.get("driver_version"),
                 "cuda": runtime.get("cuda_driver_version"), "nvcc": runtime.get("nvcc_version"),
                 "standin": bool(runtime.get("no_gpu_standin"))},
        "sglang": {"pinned": runtime.get("pinned_version"), "installed": runtime.get("installed_version"),
                   "installable": bool(runtime.get("installable")), "source": runtime.get("source"),
                   "dflash": runtime.get("dflash"), "ddtree": runtime.get("ddtree")},
        "token": {"user": auth.get("user"),
                  "fingerprint": (token_query or {}).get("fingerprint") or auth.get("fingerprint")},
        "access": _access_map(access, repo_ids),
        "commits": dict(hub.get("commits") or {}),
        "bytes_to_fetch": sum(int(r.get("bytes_to_download") or 0) for r in plan_results),
        "free_bytes": _first(f.get("free_bytes") for f in (disk or {}).get("filesystems") or [] if isinstance(f, dict)),
        "fit": (fit or {}).get("fit") if _ran(fit) else None,
        "fit_note": CLIENT_PENDING if not _ran(fit) and client_ready is False else None,
        # fabric and GPU health (host_facts), and with --deep the runtime proof: their failures are in checks
        "health": runtime.get("health"),
        "runtime_proof": runtime.get("runtime_proof"),
        "release": release_cell(releases),
        "failed_checks": checks,
    }


def unreachable_row(host):
    return {"host": host, "reachable": False, "failed_checks": [{
        "check": "unreachable", "cause": "%s did not answer (or failed before its preflight finished)" % host,
        "fix": UNREACHABLE_FIX}]}


def with_source(row, layout):
    """The row with where its bytes come from: the seed (or every host without fan-out) from the Hub."""
    if not row.get("reachable"):
        return row
    source, count = source_of(layout, row["host"]), int(row.get("bytes_to_fetch") or 0)
    return dict(row, fetch_from=source, hub_bytes=count if source == "hub" else 0,
                peer_bytes=0 if source == "hub" else count)


def _gb(count, digits):
    return str(round(int(count) / GB, digits))


def _gpu_cell(gpus):
    if int(gpus.get("count") or 0) > 0:
        return "%s x %s, %s GiB, numa %s" % (gpus["count"], "/".join(str(m) for m in gpus.get("model") or []),
                                             gpus.get("memory_gib"), json.dumps(gpus.get("numa")))
    return "absent" + (" (CPU sandbox: serving stand-in)" if gpus.get("standin") else "")


def _sglang_cell(sglang):
    text = "%s/%s" % (sglang.get("installed") or "not installed", sglang.get("pinned"))
    if sglang.get("installable") and not sglang.get("installed"):
        text += " installable"
    if sglang.get("dflash"):
        text += " dflash"
    if sglang.get("ddtree"):
        text += " ddtree=%s" % sglang["ddtree"]
    return text


def table_line(row):
    if not row.get("reachable"):
        return "%s | UNREACHABLE" % row["host"]
    gpus, token, fit, checks = row["gpus"], row["token"], row.get("fit"), row["failed_checks"]
    free = _gb(row["free_bytes"], 1) if row.get("free_bytes") is not None else "?"
    cells = [row["host"], _gpu_cell(gpus), "%s/%s" % (gpus.get("driver") or "-", gpus.get("cuda") or "-"),
             _sglang_cell(row["sglang"]), "%s (%s)" % (token.get("user") or "-", token.get("fingerprint") or "-"),
             ", ".join("%s=%s" % kv for kv in row["access"].items()) if row["access"] else "-",
             "%s %s / %s" % (_gb(row["bytes_to_fetch"], 2), row["fetch_from"], free),
             "%s @ %s" % (fit.get("pool_tokens"), fit.get("context_length")) if fit else "-",
             _release_text(row.get("release")),
             "OK" if not checks else "REFUSED: " + ", ".join(c["check"] for c in checks)]
    return " | ".join(cells)


def slice_line(layout):
    """The line a run that is a slice of its site prints (empty for a whole-site run)."""
    if not layout.get("extra_hub_copies"):
        return ""
    return ("this run covers %d of the site's %d hosts (a job slice or --limit): its fan-out tree stays inside the "
            "run, seeded by %s, and makes %d Hub copy more than a run of the whole site"
            % (len(layout["hosts"]), layout["site_hosts"], layout["seed"], layout["extra_hub_copies"]))


def site_summary(rows, layout):
    reachable = [r for r in rows if r.get("reachable")]
    return {"fanout": layout["fanout"], "seed": layout["seed"], "hub_bytes": sum(r["hub_bytes"] for r in reachable),
            "peer_bytes": sum(r["peer_bytes"] for r in reachable), "hosts": len(layout.get("hosts", [])),
            "site_hosts": layout.get("site_hosts", len(layout.get("hosts", []))), "slice": bool(layout.get("slice")),
            "extra_hub_copies": layout.get("extra_hub_copies", 0)}


def site_line(site):
    if site["fanout"]:
        line = ("fan-out: the seed %s fetches %.2f GB from the Hub, once for the site; the other hosts fetch %.2f GB "
                "from their peers" % (site["seed"], site["hub_bytes"] / GB, site["peer_bytes"] / GB))
        if site.get("extra_hub_copies"):
            line += ("; this run covers %d of the site's %d hosts (a job slice or --limit), so its tree stays inside "
                     "the run and makes %d Hub copy more than a run of the whole site"
                     % (site["hosts"], site["site_hosts"], site["extra_hub_copies"]))
        return line
    return "no fan-out: every host fetches from the Hub, %.2f GB in all" % (site["hub_bytes"] / GB)


def failure_message(rows):
    parts = ["%s: %s" % (r["host"], " ".join("[%s] %s; fix: %s." % (c["check"], c["cause"], c["fix"])
                                             for c in r["failed_checks"]))
             for r in rows if r["failed_checks"]]
    return ("preflight failed: " + " ".join(parts)) if parts else None


def report_json(rows, site, ok):
    """The report as JSON text, one line per host: {"hosts": [...], "ok": ..., "site": {...}}. Each row goes
    through json's C encoder (an indented dump takes the pure-Python one: 5 s for 10,000 hosts)."""
    hosts = ",\n".join("    " + json.dumps(r, sort_keys=True) for r in rows)
    return '{\n  "hosts": [\n%s\n  ],\n  "ok": %s,\n  "site": %s\n}\n' % (hosts, json.dumps(ok), json.dumps(site, sort_keys=True))


def report(rows, layout):
    """The fleet report: rows with their source, the site, the table lines, the JSON text, ok and the failure."""
    rows = [with_source(r, layout) for r in rows]
    site = site_summary(rows, layout)
    ok = not any(r["failed_checks"] for r in rows)
    return {"rows": rows, "site": site, "ok": ok, "table": [TABLE_HEADER] + [table_line(r) for r in rows],
            "site_line": site_line(site), "json": report_json(rows, site, ok),
            "commits": _first((r["commits"] for r in rows if r.get("reachable")), {}), "failure": failure_message(rows)}


# ---- the fan-out


def peer_address(candidates, host):
    """The address a host serves on: the first set of its candidates (weight_peer_listen_address, the
    default-route address, ansible_host), else its inventory name."""
    return next((str(c) for c in candidates if c not in (None, "")), host)


def peer_url(address, port, name):
    host = ("[%s]" % address) if ":" in str(address) else str(address)
    return "http://%s:%s/%s" % (host, port, name)


def peer_list(hosts, addresses, ports, repo_name):
    """Every host of the site in inventory order, as {name, url} of its weight server for one repository."""
    return [{"name": h, "url": peer_url(addresses[h], ports.get(h) or 8790, repo_name)} for h in hosts]


def _count(value):
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def fanout_repo_result(repo, job, from_hub):
    """One repository's fan-out outcome on one host, from its finished job (async_status result)."""
    job = job if isinstance(job, dict) else {}
    failed = bool(job.get("failed")) or not job.get("finished")
    by_kind = {"hub": _count(job.get("bytes_downloaded"))} if from_hub else dict(job.get("bytes_by_kind") or {})
    return {"name": repo.get("name"), "repo_id": job.get("repo_id") or repo.get("repo_id"), "verified": not failed,
            "files": job.get("files"), "bytes_total": job.get("bytes_total"), "bytes_by_kind": by_kind,
            "fallbacks": len(job.get("fallbacks") or []), "rejected": len(job.get("rejected") or []),
            "msg": (job.get("msg") or "did not finish") if failed else None}


def fanout_result(host, layout, repos, jobs):
    """The fact ct200_fanout ``ct200 deploy`` summarizes per host; jobs come back in repository order."""
    from_hub = source_of(layout, host) == "hub"
    results = [fanout_repo_result(repo, job, from_hub) for repo, job in zip(repos, jobs)]
    return {"seed": layout["seed"], "role": "seed" if from_hub else "peer", "repos": results,
            "verified": bool(results) and all(r["verified"] for r in results)}


def job_label(host, layout, repo):
    if layout.get("fanout"):
        return "%s %s%s" % (host, repo.get("name"), " (seed, from the Hub)" if source_of(layout, host) == "hub" else "")
    return "%s %s" % (repo.get("name"), repo.get("repo_id"))


def started_per_repo(registered):
    """Registered async loops (each {results: [...]}, one result per repository, skipped where another loop
    started it) merged into one list: per repository the result that started a job, else the first."""
    loops = [r.get("results") or [] for r in registered if isinstance(r, dict)]
    count = max([len(results) for results in loops] or [0])
    merged = []
    for index in range(count):
        candidates = [results[index] for results in loops if index < len(results) and isinstance(results[index], dict)]
        merged.append(next((c for c in candidates if c.get("ansible_job_id")), candidates[0] if candidates else {}))
    return merged


def snapshot_path(root, commit):
    """``<root>/snapshots/<commit>``: where one commit of a repository lives (hf_manifest.snapshot_dir)."""
    if not isinstance(commit, str) or not re.match(r"^[0-9a-f]{40}\Z", commit):
        raise PlanError("the commit of %s is unknown or not a 40-hex commit (%r): its snapshot directory cannot be "
                        "chosen; check the plan's hf_download result (revision, access) and re-run" % (root, commit))
    return "%s/snapshots/%s" % (str(root).rstrip("/"), commit)


def instance_dir(staged_dirs, name, models_dir, repo_id, commits):
    """The weights directory an instance serves for one repository: the weights role's result
    (``model_weights_dirs[name]``) when it ran, else the snapshot of the commit the preflight resolved
    (a phase tag that skipped the weights role), else a path that names the missing commit."""
    staged = (staged_dirs or {}).get(name) if isinstance(staged_dirs, dict) else None
    if staged:
        return staged
    commit = (commits or {}).get(repo_id) if isinstance(commits, dict) else None
    return "%s/%s/snapshots/%s" % (str(models_dir).rstrip("/"), repo_id, commit or "unresolved-commit")


def staged_repos(repos, plans, listings):
    """The repositories as staged: ``local_dir`` their snapshot of the commit this run deploys (``root_dir`` the
    repository's root); ``dirs`` name -> snapshot (model_weights_dirs); ``models`` what weight_peer serves."""
    commits = commits_of(repos, plans, listings)
    staged, dirs, create = [], {}, []
    for repo in repos:
        root = repo.get("local_dir")
        snap = snapshot_path(root, commits.get(repo.get("name")))
        staged.append(dict(repo, local_dir=snap, root_dir=root))
        dirs[repo.get("name")] = snap
        # the root and snapshots/ too: the download user stages the next commit there itself
        create += [str(root).rstrip("/"), "%s/snapshots" % str(root).rstrip("/"), snap]
    return {"repos": staged, "dirs": dirs, "commits": commits, "create_dirs": create,
            "models": [{"name": r.get("name"), "path": r["local_dir"]} for r in staged]}


def wait_jobs(host, layout, started, dirs=None):
    """The async jobs a host started (registered loop results, item = the repository), for hf_download_wait;
    ``dirs`` (name -> directory) where a job writes its progress when that is not the item's local_dir."""
    dirs = dirs or {}
    jobs = []
    for r in started_per_repo(started):
        if not isinstance(r, dict) or not r.get("ansible_job_id"):
            continue
        repo = r.get("item") or {}
        repo = repo.get("item", repo) if isinstance(repo.get("item"), dict) else repo  # a loop over listing results
        jobs.append({"jid": r["ansible_job_id"], "label": job_label(host, layout, repo),
                     "progress_file": "%s/.ct200/progress.json" % (dirs.get(repo.get("name")) or repo.get("local_dir"))})
    return jobs


def _done_line(s):
    line = "%s files, %s GB in place; fetched %s GB (%s files) in %s s at %d MB/s" % (
        s.get("files"), _gb2(s.get("bytes_total")), _gb2(s.get("bytes_downloaded") or s.get("bytes_fetched")),
        s.get("files_downloaded", s.get("files_fetched")), round(float(s.get("seconds") or 0), 1),
        int(round(float(s.get("mean_rate") or 0) / 1e6)))
    if "bytes_resumed" in s:
        line += ", resumed %s GB, kept %s GB" % (_gb2(s.get("bytes_resumed")), _gb2(s.get("bytes_skipped")))
    if s.get("retries"):
        line += ", retried %sx %s" % (s["retries"], json.dumps(s.get("retry_causes")))
    if s.get("refetched"):
        line += ", re-fetched after a hash mismatch: " + ", ".join(s["refetched"])
    return line


def commits_of(repos, plans, listings):
    """name -> commit of each repository: from this host's plan, else from the seed's listing."""
    out = {}
    for index, repo in enumerate(repos):
        for source in (plans, listings):
            result = source[index] if index < len(source or []) else None
            if isinstance(result, dict) and result.get("commit"):
                out[repo.get("name")] = result["commit"]
                break
    return out


def download_outcome(repos, plans, started, finished, commits=None):
    """Per repository one line (already complete, fetched, or FAILED with the cause), whether any changed,
    and the failures; ``plans`` and ``started`` (registered async loops) are in repository order, ``finished``
    in job order."""
    started = started_per_repo(started)
    commits = commits or {}
    by_jid = dict((j.get("ansible_job_id"), j) for j in finished or [] if isinstance(j, dict) and j.get("ansible_job_id"))
    lines, failures = [], []
    for index, repo in enumerate(repos):
        plan = plans[index] if index < len(plans) else {}
        job = started[index] if index < len(started) else {}
        label = "%s %s@%s: " % (repo.get("name"), repo.get("repo_id"), str(commits.get(repo.get("name")) or "?")[:12])
        if not (job or {}).get("ansible_job_id"):
            if (plan or {}).get("commit"):
                lines.append(label + "already complete and verified (%s files, %s GB)" % (
                    plan.get("files"), _gb2(plan.get("bytes_total"))))
            continue
        status = by_jid.get(job["ansible_job_id"])
        if not status or status.get("failed") or "bytes_total" not in status:
            cause = (status or {}).get("msg") or "did not finish"
            failures.append("%s %s: %s" % (repo.get("name"), repo.get("repo_id"), cause))
            lines.append(label + "FAILED: " + cause)
        else:
            lines.append(label + _done_line(status))
    changed = any(isinstance(j, dict) and j.get("changed") for j in finished or [])
    return {"lines": lines, "changed": changed, "failures": failures}
