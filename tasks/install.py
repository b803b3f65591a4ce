"""Install: upload the new unit, environment, secret files and spec record beside the live files.

Nothing live changes here: activate renames them into place. Uploads reuse what preflight
read of the host, so they cost no fact gathering of their own; a secret file is uploaded into
a file begin made 0600, so it is never readable by others, not even for a moment. Logged in
as a user who becomes root by sudo, the secret goes through a 0700 directory of that user's,
never a shared temporary file.
"""

from __future__ import annotations

import shlex
from io import StringIO
from pathlib import PurePosixPath

from pyinfra.api import FunctionCommand, StringCommand, operation

from fleet.core import bounds, wire
from fleet.core.layout import staged_path
from tasks.common import as_login, connector_arguments, escalates, run
from tasks.preflight import Preflight


# Where a login user that becomes root by sudo drops secret files first: a directory of its
# own, 0700 (pyinfra's sudo upload would pass them through a temp file others may read).
PRIVATE_DROP = ".sglang-fleet-upload"


def upload(state, host, path: str, content: str, secret: bool) -> bool:
    # pyinfra's own upload command lets a connector error (no SFTP subsystem, say) escape and
    # end the whole run; here it fails this host's operation, which rolls the host back.
    arguments = connector_arguments(host)
    try:
        if not (secret and escalates(arguments)):
            return host.put_file(StringIO(content), staged_path(path), **arguments)
        login = as_login(arguments)
        ok, output = host.run_shell_command(
            StringCommand(f"mkdir -p -m 700 {PRIVATE_DROP} && chmod 700 {PRIVATE_DROP} && cd {PRIVATE_DROP} && pwd"),
            **login)
        if not ok:
            raise RuntimeError(f"no private directory ~/{PRIVATE_DROP}: {output.output}")
        home = output.stdout.strip()
        if not home.startswith("/") or wire.printable(home) != home:  # the host's answer names a path here
            raise RuntimeError(f"no private directory ~/{PRIVATE_DROP}: the host answered {wire.excerpt(home)}")
        drop = f"{home}/{PurePosixPath(path).name}"
        if not host.put_file(StringIO(content), drop, **login):
            raise RuntimeError(f"could not upload it to {drop}")
        # into the file begin made 0600 for it, as root; the drop is gone either way
        ok, out = run(host, f"cat {shlex.quote(drop)} > {shlex.quote(staged_path(path))}; rc=$?; "
                            f"rm -f {shlex.quote(drop)}; exit $rc", bounds.disk(f"moving {path}'s upload into place"))
        if not ok:
            raise RuntimeError(out)
        return True
    except Exception as e:  # noqa: BLE001 - any transfer error fails the upload the same way
        host.log_styled(f"upload of {path} failed: {e}", fg="red")
        return False


def secret_commands(path: str, content: str, owner: str = "root"):
    """The commands that put `content` at `path`, 0600 and `owner`'s, never readable by others, not even for a
    moment: uploaded into a file begun 0600 for it, then renamed into place."""
    staged = shlex.quote(staged_path(path))
    yield StringCommand(f"install -m 0600 -o {owner} -g {owner} /dev/null {staged}")
    yield FunctionCommand(upload, (path, content, True), {})
    yield StringCommand(f"mv -f {staged} {shlex.quote(path)}")


@operation()
def _staged(files: list):
    for f in files:
        yield FunctionCommand(upload, (f.path, f.content, f.secret), {})


def stage(pf: Preflight) -> None:
    uploads = [f for f in pf.plan.swap if f.content is not None]  # a rollback copies its files on the host
    if uploads:  # one name on every host: pyinfra lists an operation once per name
        _staged(name="Upload the new files beside the live ones", files=uploads)
