# SPDX-License-Identifier: Apache-2.0
"""`ct200`: fleet operations on ansible-runner.

    ct200 status       -i INVENTORY [--limit L] [--forks N] [--json FILE]
    ct200 preflight    -i INVENTORY ...
    ct200 deploy       -i INVENTORY ... [--check]
    ct200 drift        -i INVENTORY ...
    ct200 rotate-token -i INVENTORY (--token-file FILE | --token-stdin) [--promote --vault-file FILE]
    ct200 promote-token --vault-file FILE (--token-file FILE | --token-stdin)

Exit codes: 0 every host ok; 1 a host failed or was unreachable, or the run failed;
2 bad input or a refusal (nothing was run).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

from ansible_collections.ct200.deploy.plugins.module_utils._io import atomic_write

from ct200_fleet import REPO
from ct200_fleet.errors import CliError
from ct200_fleet.progress import FleetProgress, table
from ct200_fleet.secret import (read_token_file, read_token_stdin, refuse_token_in_any_variable,
                                refuse_token_in_environment, token_file_outside)

PACKAGE_PLAYBOOKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "playbooks")
PLAYBOOKS = {
    "preflight": str(REPO / "playbooks" / "preflight.yml"),
    "deploy": str(REPO / "playbooks" / "deploy_kimi.yml"),
    "rotate-token": str(REPO / "playbooks" / "rotate_hf_token.yml"),
    "drift": str(REPO / "playbooks" / "rotate_hf_token.yml"),  # its --check mode changes nothing
    "status": os.path.join(PACKAGE_PLAYBOOKS, "status.yml"),
}
# Extra var naming the JSON report a playbook writes on the controller.
REPORT_VARS = {
    "preflight": "ct200_preflight_json",
    "rotate-token": "ct200_report_json",
    "drift": "ct200_report_json",
}
# Extra vars naming the 0600 file with the new token (rotate_hf_token.yml reads it on the
# controller under no_log; ct200_hf_token_next_file is the sandbox inventory's older name).
TOKEN_FILE_VARS = ("hf_token_new_file", "ct200_hf_token_next_file")
EXIT_OK, EXIT_FAILED, EXIT_REFUSED = 0, 1, 2


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("%r is not a whole number" % text) from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _add_token_source(parser, required: bool) -> None:
    group = parser.add_mutually_exclusive_group(required=required)
    group.add_argument("--token-file", metavar="FILE",
                       help="file holding the new token, one line (never pass it with -e or the environment)")
    group.add_argument("--token-stdin", action="store_true", help="read the new token from standard input")


def _add_promotion(parser) -> None:
    parser.add_argument("--vault-file", metavar="FILE",
                        help="variable file holding the inventory's current token (plain or ansible-vault)")
    parser.add_argument("--vault-password-file", metavar="FILE", help="password file for an encrypted --vault-file")
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
    parser.add_argument("--playbook", help="run this playbook instead of the subcommand's own (advanced, tests)")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="ansible-playbook verbosity")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ct200", description="CT200 fleet operations on ansible-runner.",
                                     epilog="exit codes: 0 all hosts ok, 1 a host failed or was unreachable, "
                                            "2 bad input or refusal")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    helps = {
        "preflight": "check every host before a deployment (playbooks/preflight.yml)",
        "deploy": "deploy Kimi-K2.6 with the DFlash drafter (deploy_kimi.yml)",
        "rotate-token": "roll a new Hugging Face token out, canary first (rotate_hf_token.yml)",
        "drift": "list hosts whose token is not the expected one; changes nothing",
        "status": "read-only: SGLang units and token fingerprint per host",
    }
    for name, text in helps.items():
        cmd = sub.add_parser(name, help=text, description=text)
        _add_run_options(cmd)
        if name == "deploy":
            cmd.add_argument("--check", action="store_true", help="dry run (ansible --check --diff)")
        if name == "rotate-token":
            _add_token_source(cmd, required=True)
            cmd.add_argument("--promote", action="store_true",
                             help="after a rotation with every host ok, make the new token current in --vault-file")
            _add_promotion(cmd)
    promote = sub.add_parser("promote-token", help="make a rotated token the inventory's current token",
                             description="Rewrite --vault-file atomically: the new token becomes current, the "
                                         "old one is kept as <var>_previous for rollback.")
    _add_token_source(promote, required=True)
    _add_promotion(promote)
    promote.add_argument("--json", metavar="FILE", dest="json_file", help="write the result as JSON to FILE")
    return parser


def read_token(args, stdin) -> str | None:
    if getattr(args, "token_file", None):
        return read_token_file(args.token_file)
    if getattr(args, "token_stdin", False):
        return read_token_stdin(stdin)
    return None


def check_arguments(args) -> None:
    if args.command == "promote-token" or getattr(args, "promote", False):
        if not args.vault_file:
            raise CliError("promotion needs --vault-file FILE: the variable file that holds the inventory's "
                           "current token (e.g. inventories/ct200/group_vars/ct200/vault.yml)")
    if getattr(args, "inventory", None):
        if not os.path.exists(args.inventory):
            raise CliError("inventory %s does not exist: give the path of an inventory file, directory or "
                           "script (e.g. inventories/ct200)" % args.inventory)
        # runner treats a relative string as inventory *content*; a path must be absolute
        args.inventory = os.path.abspath(args.inventory)
    playbook = getattr(args, "playbook", None) or PLAYBOOKS.get(args.command)
    if playbook and not os.path.isfile(playbook):
        raise CliError("playbook %s does not exist in this checkout: update the collection or give --playbook"
                       % playbook)


def write_json(path: str, data: dict) -> None:
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

    def close(self) -> None:
        if not self.kept:
            shutil.rmtree(self.path, ignore_errors=True)


def run_fleet_command(args, token: str | None, out) -> int:
    from ct200_fleet.fleet import run_playbook  # ansible-runner is imported only when something runs

    pdd = PrivateDataDir(args.private_data_dir, args.keep_artifacts)
    try:
        extravars = {}
        report_path = None
        if args.command in REPORT_VARS:
            report_path = os.path.join(pdd.path, "ct200-report", args.command + ".json")
            os.makedirs(os.path.dirname(report_path), mode=0o700, exist_ok=True)
            extravars[REPORT_VARS[args.command]] = report_path
        progress = FleetProgress(out=out)
        check = args.command == "drift" or getattr(args, "check", False)
        run = dict(inventory=args.inventory, private_data_dir=pdd.path, progress=progress, limit=args.limit,
                   forks=args.forks, check=check, verbosity=args.verbose, report_path=report_path)
        playbook = args.playbook or PLAYBOOKS[args.command]
        if token is None:
            outcome = run_playbook(playbook, extravars=extravars, **run)
        else:
            with token_file_outside(token, pdd.path) as token_path:
                extravars.update(dict.fromkeys(TOKEN_FILE_VARS, token_path))
                outcome = run_playbook(playbook, extravars=extravars, **run)
        print("\n" + table(outcome.hosts), file=out)
        summary = {
            "command": args.command, "playbook": playbook, "inventory": args.inventory, "limit": args.limit,
            "rc": outcome.rc, "runner_status": outcome.runner_status, "ok": outcome.ok,
            "failed_hosts": outcome.failed_hosts, "hosts": [h.as_dict() for h in outcome.hosts],
            "report": outcome.report, "private_data_dir": pdd.path if pdd.kept else None,
        }
        if outcome.ok and getattr(args, "promote", False):
            summary["promotion"] = promote_token(args, token, out)
        elif getattr(args, "promote", False):
            print("not promoted: the rotation did not succeed on every host; the inventory keeps its "
                  "current token", file=out)
        if args.json_file:
            write_json(args.json_file, summary)
        if pdd.kept:
            print("runner artifacts: %s" % outcome.artifact_dir, file=out)
        if not outcome.ok:
            print("FAILED: %s" % failure_cause(outcome), file=out)
            return EXIT_FAILED
        return EXIT_OK
    finally:
        pdd.close()


def failure_cause(outcome) -> str:
    if outcome.failed_hosts:
        return ", ".join(outcome.failed_hosts)
    if outcome.rc == 0:
        return "no host matched the inventory and --limit: check both"
    return "ansible-playbook exited %d before any host failed:\n  %s" % (outcome.rc, "\n  ".join(outcome.stdout_tail))


def promote_token(args, token: str, out) -> dict:
    from ct200_fleet.promote import promote

    result = promote(args.vault_file, token, var=args.vault_var, vault_password_file=args.vault_password_file)
    if result["changed"]:
        print("promoted: %s %s -> %s in %s (previous kept as %s_previous)" % (
            result["var"], result["previous_fingerprint"], result["fingerprint"], result["path"], result["var"]),
            file=out)
    else:
        print("promoted already: %s is %s in %s" % (result["var"], result["fingerprint"], result["path"]), file=out)
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
        if args.command == "promote-token":
            result = promote_token(args, token, out)
            if args.json_file:
                write_json(args.json_file, {"command": "promote-token", "promotion": result, "ok": True})
            return EXIT_OK
        return run_fleet_command(args, token, out)
    except CliError as exc:
        print("ct200: %s" % exc, file=sys.stderr)
        return EXIT_REFUSED
