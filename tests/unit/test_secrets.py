"""fleet.secrets: read where the deploy runs, for the class deployed; never shown, not when refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from builders import make_spec

from fleet.secrets import SecretError, Secrets, resolve, unread

KEY, ADMIN = "sk-Fleet0123456789abcdef", "adm-Fleet0123456789"
WHERE = "group_data/pro6000.py"
SPEC = make_spec(service={"api_key": {"env": "SGLANG_API_KEY_PRO6000"}, "admin_api_key": {"file": "~/admin.key"},
                          "secret_environment": {"HF_TOKEN": {"env": "HF_TOKEN"}}})


def no_files(path):
    raise FileNotFoundError(2, "No such file or directory")


def problems(spec, environ) -> list[str]:
    with pytest.raises(SecretError) as e:
        resolve(spec, WHERE, environ, read_file=no_files)
    return e.value.problems


def test_every_declared_secret_is_read_from_its_source(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "admin.key").write_text(ADMIN + "\n")  # the final newline an editor adds is not the key's
    got = resolve(SPEC, WHERE, {"SGLANG_API_KEY_PRO6000": KEY, "HF_TOKEN": "hf_x y"})
    assert got == Secrets({"api-key": KEY, "admin-api-key": ADMIN}, {"HF_TOKEN": "hf_x y"})
    assert got.api_key == KEY


def test_a_class_without_secrets_reads_nothing():
    assert resolve(make_spec(), WHERE, {}, read_file=lambda p: pytest.fail("read a file")) == Secrets()


def test_each_missing_secret_is_named_with_its_field_and_source():
    assert problems(SPEC, {}) == [
        f"{WHERE}: service.api_key: environment variable SGLANG_API_KEY_PRO6000 is not set where the deploy runs; "
        "expected the secret there",
        f"{WHERE}: service.admin_api_key: file {Path('~/admin.key').expanduser()} cannot be read "
        "(No such file or directory); expected the secret there",
        f"{WHERE}: service.secret_environment.HF_TOKEN: environment variable HF_TOKEN is not set where the deploy "
        "runs; expected the secret there",
    ]


def test_an_unreadable_file_says_why(tmp_path):
    spec = make_spec(service={"api_key": {"file": str(tmp_path / "nope.key")}})
    with pytest.raises(SecretError) as e:
        resolve(spec, WHERE, {})
    assert e.value.problems == [f"{WHERE}: service.api_key: file {tmp_path}/nope.key cannot be read "
                                "(No such file or directory); expected the secret there"]


@pytest.mark.parametrize("bad_key", ["short7!", "has space in it", "quote'd-key-123", 'dq"key-12345', "dollar$key-12345",
                                     "new\nline-12345", "sk-" + "é" * 10, "-starts-with-a-dash", ""])
def test_a_key_that_cannot_travel_safely_is_refused_without_showing_it(bad_key):
    spec = make_spec(service={"api_key": {"env": "K"}})
    (p,) = problems(spec, {"K": bad_key})
    assert p == (f"{WHERE}: service.api_key: the value of environment variable K is not a usable key: expected "
                 "8 or more of A-Z a-z 0-9 . _ ~ + / = - (not starting with -) (the value is not shown)")


@pytest.mark.parametrize("bad", ["", "two\nlines"])
def test_a_secret_environment_value_is_one_line(bad):
    spec = make_spec(service={"secret_environment": {"HF_TOKEN": {"env": "HF_TOKEN"}}})
    (p,) = problems(spec, {"HF_TOKEN": bad})
    assert "service.secret_environment.HF_TOKEN: the value of environment variable HF_TOKEN is empty or spans lines" in p


def test_unread_stands_in_for_each_declared_secret_only():
    assert unread(SPEC) == Secrets({"api-key": "unread", "admin-api-key": "unread"}, {"HF_TOKEN": "unread"})
    assert unread(make_spec()) == Secrets()


def test_a_server_args_line_is_redacted_even_with_a_key_nobody_read():
    """A rollback reads no secrets: the backed-up service may run with an old key, logged in clear."""
    line = ("[2026-11-30 12:00:00] server_args=ServerArgs(model_path='/m', api_key='sk-old-0123456789', "
            "admin_api_key=None, ssl_keyfile_password=\"pw-1\", port=30000)")
    assert Secrets().redact(line) == ("[2026-11-30 12:00:00] server_args=ServerArgs(model_path='/m', api_key='***', "
                                      "admin_api_key=None, ssl_keyfile_password='***', port=30000)")
