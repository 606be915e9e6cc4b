# SPDX-License-Identifier: Apache-2.0
"""`ct200` argument parsing and refusals: nothing runs, nothing is written, one message names cause and fix."""

import importlib
import io
import os
import tomllib
from pathlib import Path

import pytest

from ct200_fleet import cli
from localhub.personas import token_for

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def token_file(tmp_path):
    path = tmp_path / "new-token"
    path.write_text(token_for("granted_write") + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_API_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def run_cli(argv, stdin=""):
    out = io.StringIO()
    code = cli.main(argv, stdin=io.StringIO(stdin), out=out)
    return code, out.getvalue()


@pytest.mark.parametrize("command", ["preflight", "deploy", "rotate-token", "drift", "status"])
def test_every_fleet_subcommand_takes_the_common_options(command):
    argv = [command, "-i", "inv", "--limit", "h1", "--forks", "20", "--json", "s.json", "--private-data-dir", "d"]
    if command == "rotate-token":
        argv += ["--token-file", "t"]
    args = cli.build_parser().parse_args(argv)
    assert (args.command, args.inventory, args.limit, args.forks, args.json_file, args.private_data_dir) == \
        (command, "inv", "h1", 20, "s.json", "d")


def test_preflight_deep_asks_the_playbook_for_the_runtime_proof_and_the_allreduce():
    assert cli.main_extravars(cli.build_parser().parse_args(["preflight", "-i", "inv", "--deep"])) == {
        "ct200_preflight_deep": True}
    assert cli.main_extravars(cli.build_parser().parse_args(["preflight", "-i", "inv"])) == {}


def test_rotation_batches_become_rotate_serial():
    args = cli.build_parser().parse_args(["rotate-token", "-i", "inv", "--token-stdin", "--batches", "1,5%,25%"])
    assert cli.main_extravars(args) == {"rotate_serial": [1, "5%", "25%"]}
    args = cli.build_parser().parse_args(["deploy", "-i", "inv", "--force-token"])
    assert cli.main_extravars(args) == {"hf_token_force": True}


@pytest.mark.parametrize("argv", [
    ["rotate-token", "-i", "inv", "--token-stdin", "--batches", "0"],
    ["rotate-token", "-i", "inv", "--token-stdin", "--batches", "1,150%"],
    ["rotate-token", "-i", "inv", "--token-stdin", "--batches", "1,,2"],
    ["status"],                                               # no inventory
    ["status", "-i", "inv", "--forks", "0"],                 # forks must be >= 1
    ["rotate-token", "-i", "inv"],                           # no token source
    ["rotate-token", "-i", "inv", "--token-file", "t", "--token-stdin"],  # two sources
    ["rotate-token", "-i", "inv", "-e", "ct200_hf_token_next=hf_x"],     # no extra vars at all
    ["rotate-token", "-i", "inv", "--token", "hf_x"],        # no token on the command line
    ["promote-token", "--vault-file", "v.yml"],              # no token source
])
def test_bad_command_lines_are_usage_errors(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.build_parser().parse_args(argv)
    assert exc.value.code == 2
    assert "ct200" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"])
@pytest.mark.parametrize("command", [["status"], ["rotate-token", "--token-stdin"]])
def test_refuses_a_token_in_the_environment_before_running_anything(name, command, clean_env, tmp_path, capsys):
    clean_env.setenv(name, token_for("granted"))
    pdd = tmp_path / "pdd"
    code, out = run_cli([command[0], "-i", str(REPO / "inventories" / "sandbox"), "--private-data-dir", str(pdd),
                         *command[1:]], stdin=token_for("granted_write"))
    err = capsys.readouterr().err
    assert code == 2
    assert name in err and "artifacts/<id>/command" in err and "--token-file" in err
    assert token_for("granted") not in err + out
    assert not pdd.exists(), "nothing may run (or be written) while a token is in the environment"


def test_refuses_the_new_token_exported_under_another_name(clean_env, token_file, tmp_path, capsys):
    clean_env.setenv("MY_NEW_TOKEN", token_file.read_text().strip())
    code, _out = run_cli(["rotate-token", "-i", str(REPO / "inventories" / "sandbox"), "--token-file",
                          str(token_file), "--private-data-dir", str(tmp_path / "pdd")])
    err = capsys.readouterr().err
    assert code == 2 and "MY_NEW_TOKEN" in err and token_file.read_text().strip() not in err
    assert not (tmp_path / "pdd").exists()


@pytest.mark.parametrize("content, cause", [
    ("", "is empty"),
    ("\n", "is empty"),
    ("hf_one\nhf_two\n", "one line"),
    ("hf_a b\n", "one line"),
    (" hf_padded\n", "one line"),
])
def test_refuses_a_malformed_token_file(content, cause, clean_env, tmp_path, capsys):
    bad = tmp_path / "bad"
    bad.write_text(content)
    code, _out = run_cli(["rotate-token", "-i", str(REPO / "inventories" / "sandbox"), "--token-file", str(bad),
                          "--private-data-dir", str(tmp_path / "pdd")])
    err = capsys.readouterr().err
    assert code == 2 and cause in err and err.count("\n") == 1, err
    assert not (tmp_path / "pdd").exists()


def test_refuses_a_symlinked_token_file(clean_env, token_file, tmp_path, capsys):
    link = tmp_path / "link"
    link.symlink_to(token_file)
    code, _out = run_cli(["rotate-token", "-i", str(REPO / "inventories" / "sandbox"), "--token-file", str(link)])
    assert code == 2 and "symlink" in capsys.readouterr().err


def test_refuses_an_empty_token_on_stdin(clean_env, capsys):
    code, _out = run_cli(["rotate-token", "-i", str(REPO / "inventories" / "sandbox"), "--token-stdin"], stdin="\n")
    assert code == 2 and "standard input is empty" in capsys.readouterr().err


def test_promote_needs_the_vault_file(clean_env, token_file, capsys):
    code, _out = run_cli(["rotate-token", "-i", str(REPO / "inventories" / "sandbox"), "--token-file",
                          str(token_file), "--promote"])
    assert code == 2 and "--vault-file" in capsys.readouterr().err


def test_missing_inventory_is_named(clean_env, tmp_path, capsys):
    code, _out = run_cli(["status", "-i", str(tmp_path / "nope")])
    assert code == 2 and "inventory %s does not exist" % (tmp_path / "nope") in capsys.readouterr().err


def test_token_file_for_runner_lives_outside_the_private_data_dir_and_is_removed(tmp_path):
    from ct200_fleet.secret import token_file_outside

    pdd = tmp_path / "pdd"
    pdd.mkdir()
    with token_file_outside("hf_abc", str(pdd)) as path:
        assert os.path.commonpath([path, str(pdd)]) != str(pdd)
        assert (os.stat(path).st_mode & 0o777) == 0o600 and (os.stat(os.path.dirname(path)).st_mode & 0o777) == 0o700
        assert Path(path).read_text() == "hf_abc\n"
    assert not os.path.exists(path) and not os.path.exists(os.path.dirname(path))


def test_console_script_is_declared_and_resolves():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["ct200"] == "ct200_fleet.cli:main"
    assert "ct200_fleet" in project["tool"]["setuptools"]["packages"]
    module, func = project["project"]["scripts"]["ct200"].split(":")
    assert getattr(importlib.import_module(module), func) is cli.main


def test_help_lists_the_subcommands(capsys):
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["--help"])
    text = capsys.readouterr().out
    for command in ("preflight", "deploy", "rotate-token", "drift", "status", "promote-token"):
        assert command in text
