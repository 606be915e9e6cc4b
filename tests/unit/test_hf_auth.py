# SPDX-License-Identifier: Apache-2.0
import os
import pwd

import pytest

from ansible_collections.ct200.deploy.plugins.module_utils import hf_auth
from ansible_collections.ct200.deploy.plugins.module_utils.hf_auth import TokenError

TOKEN = "hf_" + "T" * 34  # test persona shape only


@pytest.mark.parametrize("raw, expected", [
    (TOKEN, TOKEN), ("  " + TOKEN + "\n", TOKEN), (TOKEN + "\r\n", TOKEN), ("\t" + TOKEN, TOKEN),
])
def test_normalize_strips_surrounding_whitespace(raw, expected):
    assert hf_auth.normalize_token(raw) == expected


@pytest.mark.parametrize("raw, words", [
    ("", "is empty"),
    ("   ", "whitespace-only"),
    ("\n", "whitespace-only"),
    ("hf_abc\ndef", "a newline (\\n) at position 6"),
    ("hf_abc\rdef", "carriage return"),
    ("hf_abc def", "a space at position 6"),
    ("hf_abc\x00def", "control character U+0000"),
    ("hf_abc\x1bdef", "control character U+001B"),
    ("hf_abcé", "U+00E9"),
    (None, "is missing"),
    (42, "must be a string"),
])
def test_normalize_refuses_with_a_message_naming_the_problem(raw, words):
    with pytest.raises(TokenError) as err:
        hf_auth.normalize_token(raw, "the token option")
    assert words in str(err.value)
    assert "the token option" in str(err.value)


def test_error_message_never_contains_the_token():
    secret = "hf_SECRETSECRETSECRET\nrest"
    with pytest.raises(TokenError) as err:
        hf_auth.normalize_token(secret)
    assert "SECRET" not in str(err.value)


def test_fingerprint_format_and_stability():
    fp = hf_auth.fingerprint(TOKEN)
    assert fp.startswith("sha256:") and len(fp) == len("sha256:") + 12
    assert fp == hf_auth.fingerprint(TOKEN)
    assert fp != hf_auth.fingerprint(TOKEN + "x")
    assert TOKEN not in fp


def test_token_path_follows_huggingface_hub_precedence(tmp_path):
    home = os.path.expanduser("~")
    assert hf_auth.hf_token_path(environ={}) == os.path.join(home, ".cache", "huggingface", "token")
    assert hf_auth.hf_token_path(environ={"XDG_CACHE_HOME": "/x"}) == "/x/huggingface/token"
    assert hf_auth.hf_token_path(environ={"XDG_CACHE_HOME": "/x", "HF_HOME": "/h"}) == "/h/token"
    assert hf_auth.hf_token_path(environ={"HF_HOME": "/h", "HF_TOKEN_PATH": "/t/tok"}) == "/t/tok"
    assert hf_auth.hf_token_path(environ={"HF_HOME": "~/hf"}) == os.path.join(home, "hf", "token")


def test_token_path_for_another_user_ignores_this_process_env():
    other = pwd.getpwnam("nobody")
    path = hf_auth.hf_token_path("nobody", environ={"HF_TOKEN_PATH": "/mine"})
    assert path == os.path.join(other.pw_dir, ".cache", "huggingface", "token")


def test_unknown_user_is_a_clear_error():
    with pytest.raises(TokenError, match="does not exist"):
        hf_auth.hf_token_path("no-such-user-ct200")


def test_resolution_order(tmp_path):
    tok_file = tmp_path / "token"
    tok_file.write_text("hf_FILE" + "F" * 30 + "\n")
    env = {"HF_TOKEN_PATH": str(tok_file)}
    assert hf_auth.resolve_token(environ=env).source == "file:" + str(tok_file)
    env["HUGGING_FACE_HUB_TOKEN"] = "hf_LEGACY" + "L" * 30
    assert hf_auth.resolve_token(environ=env).source == "env:HUGGING_FACE_HUB_TOKEN"
    env["HF_TOKEN"] = "hf_ENV" + "E" * 30
    assert hf_auth.resolve_token(environ=env).source == "env:HF_TOKEN"
    res = hf_auth.resolve_token(explicit=" " + TOKEN + "\n", environ=env)
    assert (res.source, res.token) == ("explicit", TOKEN)


def test_empty_env_falls_through_to_file_like_huggingface_hub(tmp_path):
    tok_file = tmp_path / "token"
    tok_file.write_text(TOKEN + "\r\n")
    res = hf_auth.resolve_token(environ={"HF_TOKEN": "", "HF_TOKEN_PATH": str(tok_file)})
    assert res.token == TOKEN and res.source.startswith("file:")
    assert "HF_TOKEN is set but empty" in res.problems


def test_nothing_found_records_every_place_looked(tmp_path):
    res = hf_auth.resolve_token(environ={"HF_TOKEN": " ", "HF_TOKEN_PATH": str(tmp_path / "none")})
    assert res.token is None
    msg = hf_auth.describe_missing(res)
    assert "env:HF_TOKEN" in msg and "does not exist" in msg


def test_empty_token_file_is_reported(tmp_path):
    f = tmp_path / "token"
    f.write_text("\n")
    res = hf_auth.resolve_token(environ={"HF_TOKEN_PATH": str(f)})
    assert res.token is None and any("is empty" in p for p in res.problems)


def test_explicit_empty_token_is_an_error_not_anonymous():
    with pytest.raises(TokenError, match="empty"):
        hf_auth.resolve_token(explicit="", environ={})


def test_newline_inside_env_token_is_refused():
    with pytest.raises(TokenError, match="HF_TOKEN contains a newline"):
        hf_auth.resolve_token(environ={"HF_TOKEN": "hf_abc\ndef"})


def test_repr_hides_the_token():
    res = hf_auth.resolve_token(explicit=TOKEN, environ={})
    assert TOKEN not in repr(res) and res.fingerprint in repr(res)
