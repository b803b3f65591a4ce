"""tasks/install.upload against a pyinfra Host whose commands the test answers: where each file
lands, a secret's way through the login user's 0700 directory under sudo, and every failure a
failed upload (never an exception that would end the run)."""

from __future__ import annotations

from fakehost import fake_host

from fleet.core.layout import staged_path
from tasks.install import PRIVATE_DROP, upload

UNIT, SECRET = "/etc/systemd/system/sglang.service", "/etc/sglang/sglang.yaml"


def test_a_file_goes_beside_the_live_one():
    fake = fake_host(lambda command: (True, ""))
    assert upload(None, fake.host, UNIT, "[Unit]\n", secret=False)
    assert fake.uploads == {staged_path(UNIT): "[Unit]\n"}


def test_a_secret_under_sudo_passes_through_the_login_users_own_directory():
    fake = fake_host(lambda command: (True, "/home/ubuntu/.sglang-fleet-upload\n" if "pwd" in command else ""),
                     _sudo=True)
    assert upload(None, fake.host, SECRET, "api-key: k\n", secret=True)
    mkdir, copy = fake.calls[0], fake.calls[-1]
    assert PRIVATE_DROP in mkdir.command and not mkdir.sudo  # as the login user
    assert fake.uploads == {"/home/ubuntu/.sglang-fleet-upload/sglang.yaml": "api-key: k\n"}
    assert copy.sudo and f"> {staged_path(SECRET)}" in copy.command and "rm -f" in copy.command


def test_a_home_the_host_names_oddly_is_no_upload():
    for home in ("relative/dir", "/home/u\x1b[2J", ""):
        fake = fake_host(lambda command, home=home: (True, home if "pwd" in command else ""), _sudo=True)
        assert not upload(None, fake.host, SECRET, "k", secret=True)
        assert fake.uploads == {}


def test_a_transfer_that_breaks_fails_the_upload_and_nothing_else():
    fake = fake_host(lambda command: (True, ""))
    fake.upload_fails = True
    assert upload(None, fake.host, UNIT, "[Unit]\n", secret=False) is False
