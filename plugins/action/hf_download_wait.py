# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""Wait for async hf_download jobs, printing one progress line per job every ``interval`` seconds.

A loop in plain YAML would need a recursive include_tasks per polling round, which
ansible-core turns into Python recursion: it fails after ~200 rounds (RecursionError,
measured with 2.19.14), i.e. after under two hours at 30 s.  This action polls in a
plain loop instead: per round and job one ``async_status`` and one ``slurp`` of the
progress file the module writes, then ``Display`` prints the lines (they are relayed
from the worker process to the controller's output).
"""

from __future__ import annotations

import base64
import json
import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.ct200.deploy.plugins.module_utils.hf_progress import WAIT_ARGUMENT_SPEC, format_line

display = Display()


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(WAIT_ARGUMENT_SPEC)

    def _progress(self, path, task_vars):
        res = self._execute_module(module_name="ansible.builtin.slurp", module_args={"src": path},
                                   task_vars=task_vars)
        if res.get("failed") or "content" not in res:
            return None
        try:
            return json.loads(base64.b64decode(res["content"]).decode("utf-8"))
        except ValueError:
            return None

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        args = self._task.args
        jobs = args.get("jobs")
        if not isinstance(jobs, list) or not all(isinstance(j, dict) and j.get("jid") for j in jobs):
            raise AnsibleActionFail("jobs must be a list of {jid, label, progress_file} (the registered async "
                                    "results of ct200.deploy.hf_download)")
        try:
            interval = float(args.get("interval", WAIT_ARGUMENT_SPEC["interval"]["default"]))
            timeout = float(args.get("timeout", WAIT_ARGUMENT_SPEC["timeout"]["default"]))
        except (TypeError, ValueError):
            raise AnsibleActionFail("interval and timeout must be numbers of seconds")
        if interval <= 0 or timeout <= 0:
            raise AnsibleActionFail("interval and timeout must be positive")
        host = task_vars.get("inventory_hostname", "?")
        # what ansible.builtin.async_status's own action passes: the become user's job directory
        async_dir = self._remote_expand_user(self.get_shell_option("async_dir", default="~/.ansible_async"))
        not_before = time.time() - 120  # progress files older than this are from an earlier run
        deadline = time.monotonic() + timeout
        final = {}
        rounds = 0
        while True:
            rounds += 1
            lines = []
            for index, job in enumerate(jobs):
                label = job.get("label") or job["jid"]
                if index in final:
                    continue
                status = self._execute_module(module_name="ansible.legacy.async_status",
                                              module_args={"jid": job["jid"], "mode": "status",
                                                           "_async_dir": async_dir}, task_vars=task_vars)
                if status.get("finished"):
                    final[index] = status
                    lines.append(format_line(label, None, finished=True, failed=bool(status.get("failed"))))
                    continue
                if status.get("failed"):  # unknown job id, unreadable job file
                    final[index] = status
                    lines.append("%s: %s" % (label, status.get("msg", "async_status failed")))
                    continue
                progress = self._progress(job["progress_file"], task_vars) if job.get("progress_file") else None
                lines.append(format_line(label, progress, not_before=not_before))
            for line in lines:
                display.display("[%s] %s" % (host, line))
            if len(final) == len(jobs):
                break
            if time.monotonic() > deadline:
                result["failed"] = True
                result["msg"] = ("downloads still running after %d s (timeout); they continue in the background "
                                 "and a re-run resumes them" % timeout)
                break
            time.sleep(interval)
        result["rounds"] = rounds
        result["jobs"] = [final.get(i, {"finished": 0, "label": j.get("label")}) for i, j in enumerate(jobs)]
        result["changed"] = any(r.get("changed") for r in result["jobs"])
        return result
