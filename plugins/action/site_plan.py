# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""Action plugin ct200.deploy.site_plan: the site's decisions on the controller.

Reads the registered results of the hosts (named by ``host_vars``, looked up in each host's
hostvars) and the controller's Hub metadata, and returns what module_utils/site_plan.py
decides; it contacts no host.  See plugins/modules/site_plan.py for the options.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail, AnsibleUndefinedVariable
from ansible.plugins.action import ActionBase

from ansible_collections.ct200.deploy.plugins.module_utils import site_plan


def _lookup(variables, path):
    """``name`` or ``name.key.key`` in one host's variables (the first set of a list of them); None
    when none is set."""
    if isinstance(path, (list, tuple)):
        return next((v for v in (_lookup(variables, p) for p in path) if v not in (None, "")), None)
    value = variables
    for part in str(path).split("."):
        try:
            value = value[part]
        except (KeyError, TypeError, IndexError, AnsibleUndefinedVariable):
            return None
    return value


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(site_plan.ARGUMENT_SPEC)

    def _host_vars(self, task_vars, host):
        """``hostvars[host]``, resolved once per host and run: each resolution is a whole get_vars of that host
        (its inventory, group and magic variables: groups and play-host lists of the site's length), and a
        report reads a dozen of its variables for every host of the site."""
        cache = self._host_vars_cache
        if host not in cache:
            hostvars = task_vars.get("hostvars") or {}
            try:
                cache[host] = hostvars[host]
            except (KeyError, AnsibleUndefinedVariable):
                cache[host] = {}
        return cache[host]

    def _per_host(self, task_vars, hosts, names):
        """{input: {host: value}} for each input -> variable name of ``host_vars``."""
        out = {}
        for key, path in (names or {}).items():
            out[key] = dict((h, _lookup(self._host_vars(task_vars, h), path)) for h in hosts)
        return out

    def _layout(self, args, task_vars):
        """The layout given (``layout``, or the ``site`` host var of the first host), else computed."""
        group = list(args.get("group") or [])
        hosts = site_plan.host_order(group, args.get("hosts"))
        given = args.get("layout")
        if not given and hosts and (args.get("host_vars") or {}).get("site"):
            given = _lookup(self._host_vars(task_vars, hosts[0]), args["host_vars"]["site"])
        if given:
            return site_plan.kept_layout(given, group, args.get("hosts"))
        return site_plan.site_layout(group, args.get("hosts"), args.get("enabled"), args.get("seed"),
                                     args.get("degree") if args.get("degree") not in (None, "") else 2)

    def _stage_token(self, args, task_vars):
        return site_plan.token_status(args.get("token"), bool(args.get("vault_defined", True)),
                                      str(args.get("inventory_dir") or ""))

    def _stage_fetch(self, args, task_vars):
        hosts = list(args.get("hosts") or [])
        got = self._per_host(task_vars, hosts, args.get("host_vars"))
        # each host's own models directory (host_vars models_dir), the option for a host without one
        models = dict((h, got["models_dir"][h] if got.get("models_dir", {}).get(h) not in (None, "") else args.get("models_dir"))
                      for h in hosts)
        return site_plan.fetch_plan(list(args.get("repos") or []), hosts, got.get("probe", {}), got.get("token_query", {}),
                                    args.get("fingerprint"), models, args.get("commits"), args.get("layout"))

    def _stage_hub(self, args, task_vars):
        return site_plan.hub_facts(args.get("resolved"), args.get("access"), args.get("listed"), args.get("fetch"),
                                   args.get("token_problem"), args.get("repos") or [])

    def _stage_host_plan(self, args, task_vars):
        return site_plan.host_plan(args.get("plan"))

    def _stage_known_plan(self, args, task_vars):
        return {"plan": site_plan.known_plan(list(args.get("repos") or []), args.get("fetch"), args.get("plan"),
                                             args.get("verify"))}

    def _stage_report(self, args, task_vars):
        layout = self._layout(args, task_vars)
        names = dict(args.get("host_vars") or {})
        checks = list(args.get("host_checks") or [])
        got = self._per_host(task_vars, layout["hosts"], dict(names, done=args.get("done") or "ct200_preflight_fit"))
        got_checks = self._per_host(task_vars, layout["hosts"], dict((c, c) for c in checks))
        rows = []
        for host in layout["hosts"]:
            if got["done"][host] is None:
                rows.append(site_plan.unreachable_row(host))
                continue
            hub = got.get("hub", {}).get(host) or {}
            repo_ids = list(hub.get("repos") or [])
            token = got.get("token", {}).get(host) or {}
            value = dict((k, got.get(k, {}).get(host))
                         for k in ("runtime", "token_query", "plan", "disk", "fit", "releases"))
            client_ready = str(got.get("client_ready", {}).get(host)).lower() != "false"  # unset: ready
            source = site_plan.fit_source(host, got.get("fetch_plan", {}).get(host), got.get("configs"))
            failed = site_plan.failed_checks([(c, got_checks[c][host]) for c in checks], token.get("problem"), hub,
                                             len(repo_ids), value["plan"], value["disk"], value["fit"], client_ready,
                                             source)
            rows.append(site_plan.host_row(host, value["runtime"], value["token_query"], hub, repo_ids, value["plan"],
                                           value["disk"], value["fit"], failed, client_ready, value["releases"]))
        return dict(site_plan.report(rows, layout), layout=layout)

    def _stage_site(self, args, task_vars):
        layout = self._layout(args, task_vars)
        names = args.get("host_vars") or {}
        peers, addresses, repos = {}, {}, list(args.get("repos") or [])
        if layout["fanout"] and repos:
            got = self._per_host(task_vars, layout["hosts"], {"address": names.get("address") or ["ansible_host"],
                                                              "port": names.get("port") or "weight_peer_port"})
            addresses = dict((h, site_plan.peer_address([got["address"][h]], h)) for h in layout["hosts"])
            ports = dict((h, got["port"][h] or args.get("port") or 8790) for h in layout["hosts"])
            for repo in repos:
                peers[repo["name"]] = site_plan.peer_list(layout["hosts"], addresses, ports, repo["name"])
        return {"layout": layout, "peers": peers, "addresses": addresses, "seed": layout["seed"],
                "fan_out": site_plan.fans_out_now(layout, args.get("fetch")),
                "slice_line": site_plan.slice_line(layout),
                "models": [{"name": r.get("name"), "path": r.get("local_dir")} for r in repos if isinstance(r, dict)]}

    def _stage_jobs(self, args, task_vars):
        host = task_vars.get("inventory_hostname")
        return {"jobs": site_plan.wait_jobs(host, args.get("layout") or {"fanout": False}, list(args.get("started") or []),
                                            args.get("dirs"))}

    def _stage_staged(self, args, task_vars):
        return site_plan.staged_repos(list(args.get("repos") or []), list(args.get("plans") or []),
                                      list(args.get("listings") or []))

    def _stage_outcome(self, args, task_vars):
        repos, plans = list(args.get("repos") or []), list(args.get("plans") or [])
        commits = site_plan.commits_of(repos, plans, list(args.get("listings") or []))
        outcome = site_plan.download_outcome(repos, plans, list(args.get("started") or []), list(args.get("finished") or []),
                                             commits)
        return dict(outcome, commits=commits)

    def _stage_fanout_result(self, args, task_vars):
        host = task_vars.get("inventory_hostname")
        fact = site_plan.fanout_result(host, args.get("layout") or {}, list(args.get("repos") or []),
                                       list(args.get("finished") or []))
        return {"ansible_facts": {"ct200_fanout": fact}}

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        stage = self._task.args.get("stage")
        self._host_vars_cache = {}
        if stage not in site_plan.STAGES:
            raise AnsibleActionFail("stage must be one of %s, got %r" % (", ".join(site_plan.STAGES), stage))
        try:
            decided = getattr(self, "_stage_" + stage)(self._task.args, task_vars or {})
        except site_plan.PlanError as exc:
            raise AnsibleActionFail(str(exc))
        result.update(decided)
        result["changed"] = bool(decided.get("changed"))  # only the outcome of downloads reports a change
        return result
