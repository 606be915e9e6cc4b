# SPDX-License-Identifier: Apache-2.0
"""`ct200`: fleet operations on ansible-runner.

    ct200 status        -i INVENTORY [--limit L] [--forks N] [--json FILE]
    ct200 preflight     -i INVENTORY ... [--deep]
    ct200 deploy        -i INVENTORY ... [--check] [--tags T] [--force-token]
    ct200 rollout       -i INVENTORY ... [--batches 1,25%]
    ct200 rollback      -i INVENTORY ... [--limit HOSTS] [--batches 1,25%]
    ct200 drift         -i INVENTORY ... [--token-file FILE]
    ct200 rotate-token  -i INVENTORY (--token-file FILE | --token-stdin) [--batches 1,25%]
                        [--promote (--current-token-file FILE | --vault-file FILE)]
    ct200 promote-token -i INVENTORY (--token-file FILE | --token-stdin) (--current-token-file FILE | --vault-file FILE)

Exit codes: 0 every host ok; 1 a host failed or was unreachable, or the run failed;
2 bad input or a refusal (nothing was run).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import tempfile

from ansible_collections.ct200.deploy.plugins.module_utils._io import atomic_write
from ansible_collections.ct200.deploy.plugins.module_utils.redact import scrub

from ct200_fleet import COLLECTION
from ct200_fleet.errors import CliError
from ct200_fleet.progress import FleetProgress, table
from ct200_fleet.secret import (read_token_file, read_token_stdin, refuse_token_in_any_variable,
                                refuse_token_in_environment, token_file_outside)

PLAYBOOKS = {
    "preflight": COLLECTION.playbook("preflight.yml"),
    "deploy": COLLECTION.playbook("deploy_kimi.yml"),
    "rollout": COLLECTION.playbook("rollout.yml"),
    "rollback": COLLECTION.playbook("rollback.yml"),
    "rotate-token": COLLECTION.playbook("rotate_hf_token.yml"),
    "drift": COLLECTION.playbook("token_drift.yml"),
    "status": COLLECTION.playbook("status.yml"),
    "promote-token": COLLECTION.playbook("promote_hf_token.yml"),
}
# Extra var naming the JSON report a playbook writes on the controller (per-host verdicts).
REPORT_VARS = {
    "status": "ct200_status_json",
    "preflight": "ct200_preflight_json",
    "rotate-token": "ct200_report_json",
    "drift": "ct200_report_json",
    "promote-token": "ct200_report_json",
}
# Extra var naming the controller file with the token given to the command (read by the
# playbook with lookup('file') under no_log; the token itself is never an extra var).
TOKEN_FILE_VAR = {
    "rotate-token": "hf_token_new_file",
    "promote-token": "hf_token_new_file",
    "drift": "hf_token_expected_file",
}
EXIT_OK, EXIT_FAILED, EXIT_REFUSED = 0, 1, 2


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("%r is not a whole number" % text) from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _batches(text: str) -> list:
    """'1,5%,25%' -> [1, '5%', '25%'] (Ansible serial: host counts or percentages)."""
    sizes = []
    for part in text.split(","):
        part = part.strip()
        if part.isdigit() and int(part) > 0:
            sizes.append(int(part))
        elif part.endswith("%") and part[:-1].isdigit() and 0 < int(part[:-1]) <= 100:
            sizes.append(part)
        else:
            raise argparse.ArgumentTypeError("%r: give batch sizes as host counts or percentages, e.g. 1,5%%,25%%"
                                             % text)
    return sizes


def _add_token_source(parser, required: bool, what: str = "the new token") -> None:
    group = parser.add_mutually_exclusive_group(required=required)
    group.add_argument("--token-file", metavar="FILE",
                       help="file holding %s, one line (never pass a token with -e or the environment)" % what)
    group.add_argument("--token-stdin", action="store_true", help="read %s from standard input" % what)


def _add_promotion(parser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--current-token-file", metavar="FILE",
                       help="controller file the inventory reads its current token from (ct200_hf_token_file): "
                            "promoted by playbooks/promote_hf_token.yml, previous kept as a 0600 backup")
    group.add_argument("--vault-file", metavar="FILE",
                       help="variable file holding the inventory's current token (ansible-vault, or plain text "
                            "readable by its owner only): rewritten atomically by playbooks/promote_hf_token.yml, "
                            "previous kept as <var>_previous")
    parser.add_argument("--vault-var", default="vault_hf_token", metavar="NAME",
                        help="variable of the current token in --vault-file (default: %(default)s)")


def _add_run_options(parser) -> None:
    parser.add_argument("-i", "--inventory", required=True, help="inventory path (file, directory or script)")
    parser.add_argument("-l", "--limit", help="further limit the hosts (ansible --limit pattern)")
    parser.add_argument("-f", "--forks", type=_positive_int, help="parallel hosts (ansible --forks)")
    parser.add_argument("--json", metavar="FILE", dest="json_file", help="write the summary as JSON to FILE")
    parser.add_argument("--private-data-dir", metavar="DIR",
                        help="ansible-runner private data dir, kept after the run (default: a fresh "
                             "temporary directory, removed at the end unless --keep-artifacts)")
    parser.add_argument("--keep-artifacts", action="store_true", help="keep the temporary private data dir")
    parser.add_argument("--vault-password-file", metavar="FILE",
                        help="ansible-vault password file (the inventory's vault, and --vault-file)")
    parser.add_argument("--playbook", help="run this playbook instead of the subcommand's own (advanced, tests)")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="ansible-playbook verbosity (-vvv)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ct200", description="CT200 fleet operations on ansible-runner.",
                                     epilog="exit codes: 0 all hosts ok, 1 a host failed, was unreachable or is "
                                            "off the expected token, 2 bad input or refusal (nothing ran)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    helps = {
        "preflight": "check every host before a deployment (playbooks/preflight.yml)",
        "deploy": "deploy Kimi-K2.6 with the DFlash drafter (deploy_kimi.yml)",
        "rollout": "stage the inventory's release beside the serving one, then switch a canary and batches behind "
                   "gates; a failed gate moves that host back and stops (rollout.yml)",
        "rollback": "return hosts (--limit) to their previous release, in batches (rollback.yml)",
        "rotate-token": "roll a new Hugging Face token out, canary first, then batches (rotate_hf_token.yml)",
        "drift": "list hosts off the expected token (the inventory's, or --token-file's); changes nothing",
        "status": "read-only: per instance health, release, acceptance length, tok/s, queue, KV use, token, router",
        "promote-token": "make a rotated token the inventory's current token, once every host holds it",
    }
    for name, text in helps.items():
        cmd = sub.add_parser(name, help=text, description=text)
        _add_run_options(cmd)
        if name == "preflight":
            cmd.add_argument("--deep", action="store_true",
                             help="also prove the installed SGLang runtime on each host's GPUs (pip check, torch CUDA "
                                  "13, arch, sgl_kernel, a CUDA op per GPU) and time an NCCL all-reduce: the command "
                                  "to run on a GPU host (ct200_preflight_deep)")
        if name == "deploy":
            cmd.add_argument("--check", action="store_true", help="dry run (ansible --check --diff)")
            cmd.add_argument("--tags", help="only these phases (ansible --tags), e.g. hf_token,model_weights")
            cmd.add_argument("--force-token", action="store_true",
                             help="overwrite a host's different valid token with the inventory's (hf_token_force)")
        if name in ("rollout", "rollback"):
            cmd.add_argument("--batches", type=_batches, metavar="LIST",
                             help="batch sizes, e.g. 1,25%% (ct200_rollout_serial; default the inventory's, else "
                                  "1,25%%: a canary, then quarters)")
        if name == "drift":
            _add_token_source(cmd, required=False, what="the token to expect (default: the inventory's current)")
        if name == "rotate-token":
            _add_token_source(cmd, required=True)
            cmd.add_argument("--check", action="store_true", help="dry run: which hosts would rotate")
            cmd.add_argument("--batches", type=_batches, metavar="LIST",
                             help="rollout batch sizes after which the next batch starts, e.g. 1,5%%,25%% "
                                  "(rotate_serial; default the playbook's 1,25%%)")
            cmd.add_argument("--promote", action="store_true",
                             help="after a rotation with every host ok, make the new token the current one "
                                  "(--current-token-file or --vault-file)")
            _add_promotion(cmd)
        if name == "promote-token":
            _add_token_source(cmd, required=True, what="the rotated token")
            _add_promotion(cmd)
    return parser


def read_token(args, stdin) -> str | None:
    if getattr(args, "token_file", None):
        return read_token_file(args.token_file)
    if getattr(args, "token_stdin", False):
        return read_token_stdin(stdin)
    return None


def wants_promotion(args) -> bool:
    return args.command == "promote-token" or getattr(args, "promote", False)


def check_arguments(args) -> None:
    if wants_promotion(args) and not (args.current_token_file or args.vault_file):
        raise CliError("promotion needs where the inventory's current token lives: --current-token-file FILE "
                       "(the file ct200_hf_token is read from) or --vault-file FILE (e.g. "
                       "inventories/ct200/group_vars/ct200/vault.yml)")
    if not os.path.exists(args.inventory):
        raise CliError("inventory %s does not exist: give the path of an inventory file, directory or "
                       "script (e.g. inventories/ct200)" % args.inventory)
    # runner treats a relative string as inventory *content*; a path must be absolute
    args.inventory = os.path.abspath(args.inventory)
    playbook = args.playbook or PLAYBOOKS[args.command]
    if not os.path.isfile(playbook):
        raise CliError("playbook %s does not exist in the collection at %s: update the collection or give "
                       "--playbook" % (playbook, COLLECTION.root))


def write_json(path: str, data: dict, secrets=()) -> None:
    """The run's summary, through the one redaction (a host's result may quote what an upstream echoed)."""
    data = scrub(data, secrets)
    atomic_write(os.path.abspath(path), json.dumps(data, indent=2, sort_keys=True) + "\n", mode=0o644)


class PrivateDataDir:
    """The runner's private data dir: the operator's (kept), or a fresh temporary one."""

    def __init__(self, given: str | None, keep: bool):
        self.kept = bool(given) or keep
        if given:
            os.makedirs(given, mode=0o700, exist_ok=True)
            self.path = os.path.abspath(given)
        else:
            self.path = tempfile.mkdtemp(prefix="ct200-runner-")

    def report_path(self, command: str) -> str:
        path = os.path.join(self.path, "ct200-report", command + ".json")
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        return path

    def close(self) -> None:
        if not self.kept:
            shutil.rmtree(self.path, ignore_errors=True)


class Session:
    """One `ct200` invocation: its private data dir, the token file (if any), its output."""

    def __init__(self, args, pdd: PrivateDataDir, out, token: str | None = None, token_path: str | None = None):
        self.args, self.pdd, self.out, self.token, self.token_path = args, pdd, out, token, token_path

    def run(self, command: str, playbook: str | None = None, extravars: dict | None = None, check: bool = False):
        from ct200_fleet.fleet import run_playbook  # ansible-runner is imported only when something runs

        args = self.args
        extravars = dict(extravars or {})
        report_path = None
        if command in REPORT_VARS:
            report_path = self.pdd.report_path(command)
            extravars[REPORT_VARS[command]] = report_path
        if self.token_path and command in TOKEN_FILE_VAR:
            extravars[TOKEN_FILE_VAR[command]] = self.token_path
        if command in ("deploy", "rollout"):
            # its first play is the preflight, whose report otherwise lands in $PWD/ct200-preflight.json
            extravars.setdefault("ct200_preflight_json", self.pdd.report_path("preflight"))
        cmdline = (["--check", "--diff"] if check else []) + (
            ["--vault-password-file", os.path.abspath(args.vault_password_file)] if args.vault_password_file else [])
        return run_playbook(playbook or PLAYBOOKS[command], inventory=args.inventory, private_data_dir=self.pdd.path,
                            progress=FleetProgress(out=self.out), limit=args.limit, forks=args.forks,
                            extravars=extravars, cmdline=" ".join(map(shlex.quote, cmdline)) or None,
                            verbosity=args.verbose, report_path=report_path, tags=getattr(args, "tags", None))


def summarize(args, command: str, playbook: str, outcome, pdd: PrivateDataDir) -> dict:
    return {
        "command": command, "playbook": playbook, "inventory": args.inventory, "limit": args.limit,
        "rc": outcome.rc, "runner_status": outcome.runner_status, "ok": outcome.ok,
        "failed_hosts": outcome.failed_hosts, "hosts": [h.as_dict() for h in outcome.hosts],
        "report": outcome.report, "private_data_dir": pdd.path if pdd.kept else None,
        "artifact_dir": outcome.artifact_dir if pdd.kept else None,
    }


def report(outcome, out) -> None:
    print("\n" + table(outcome.hosts), file=out)
    if not outcome.ok:
        print("FAILED: %s" % failure_cause(outcome), file=out)


def failure_cause(outcome) -> str:
    if outcome.failed_hosts:
        return ", ".join(outcome.failed_hosts)
    if outcome.rc == 0:
        return "no host matched the inventory and --limit: check both"
    return "ansible-playbook exited %d before any host failed:\n  %s" % (outcome.rc, "\n  ".join(outcome.stdout_tail))


def main_extravars(args) -> dict:
    extravars = {}
    if getattr(args, "force_token", False):
        extravars["hf_token_force"] = True
    if getattr(args, "batches", None):
        extravars["ct200_rollout_serial" if args.command in ("rollout", "rollback") else "rotate_serial"] = args.batches
    if getattr(args, "deep", False):
        extravars["ct200_preflight_deep"] = True
    return extravars


def run_command(session: Session) -> int:
    args, out = session.args, session.out
    if args.command == "promote-token":
        result = promote(session)
        summary = {"command": "promote-token", "ok": result["ok"], "promotion": result}
    else:
        playbook = args.playbook or PLAYBOOKS[args.command]
        outcome = session.run(args.command, playbook, main_extravars(args), check=getattr(args, "check", False))
        report(outcome, out)
        summary = summarize(args, args.command, playbook, outcome, session.pdd)
        if args.command == "status":
            from ct200_fleet.status import instance_report  # one place for the table and its verdict

            summary.update(instance_report(outcome.report, out))
            summary["ok"] = summary["ok"] and summary["instances_ok"]
        if getattr(args, "promote", False):
            if outcome.ok and not args.check:
                summary["promotion"] = promote(session)
                summary["ok"] = summary["promotion"]["ok"]
            else:
                print("not promoted: the rotation did not succeed on every host; the inventory keeps its "
                      "current token", file=out)
    if args.json_file:
        write_json(args.json_file, summary, [session.token] if session.token else [])
    if session.pdd.kept:
        print("runner private data dir: %s" % session.pdd.path, file=out)
    return EXIT_OK if summary["ok"] else EXIT_FAILED


def promote(session: Session) -> dict:
    """Promotion through playbooks/promote_hf_token.yml, for a controller token file and a vault file alike
    (one implementation: ct200.deploy.hf_token_promote). The playbook first proves that every host
    already holds the pending token (token_drift.yml) and that the Hub accepts it."""
    args, out = session.args, session.out
    path = os.path.abspath(args.current_token_file or args.vault_file)
    result_path = session.pdd.report_path("promotion")
    extravars = {"ct200_promotion_json": result_path}
    if args.current_token_file:
        extravars["ct200_hf_token_file"] = path
    else:
        extravars.update(ct200_vault_file=path, ct200_vault_var=args.vault_var)
    outcome = session.run("promote-token", extravars=extravars)
    report(outcome, out)
    result = {"ok": outcome.ok, "method": "promote_hf_token.yml", "path": path, "rc": outcome.rc,
              "hosts": [h.as_dict() for h in outcome.hosts]}
    if outcome.ok and os.path.exists(result_path):
        with open(result_path, encoding="utf-8") as handle:
            result.update(json.load(handle), ok=True)
        verb = "promoted" if result["changed"] else "already current"
        print("%s: %s %s -> %s in %s (%s)" % (
            verb, result.get("var", "the token file"), result["previous_fingerprint"], result["fingerprint"], path,
            "previous kept as %s_previous" % result["var"] if result["target"] == "vars_file"
            else "previous kept in %s" % result.get("backup_file", "no backup: there was none")), file=out)
    else:
        print("not promoted: %s keeps the previous token (see above)" % path, file=out)
    return result


def main(argv=None, stdin=None, out=None) -> int:
    out = out or sys.stdout
    args = build_parser().parse_args(argv)
    try:
        refuse_token_in_environment(os.environ)
        check_arguments(args)
        token = read_token(args, stdin or sys.stdin.buffer)
        if token is not None:
            refuse_token_in_any_variable(token, os.environ)
        pdd = PrivateDataDir(args.private_data_dir, args.keep_artifacts)
        try:
            if token is None:
                return run_command(Session(args, pdd, out))
            with token_file_outside(token, pdd.path) as token_path:
                return run_command(Session(args, pdd, out, token, token_path))
        finally:
            pdd.close()
    except CliError as exc:
        print("ct200: %s" % exc, file=sys.stderr)
        return EXIT_REFUSED
