"""Install: upload the new unit, environment, secret files and spec record beside the live files.

Nothing live changes here: activate renames them into place. Uploads reuse what preflight
read of the host, so they cost no fact gathering of their own; a secret file is uploaded into
a file begin made 0600, so it is never readable by others, not even for a moment.
"""

from __future__ import annotations

from io import StringIO

from pyinfra.api import FunctionCommand, operation

from fleet.rollout import staged_path
from tasks.preflight import Preflight


def _upload(state, host, path: str, content: str) -> bool:
    # pyinfra's own upload command lets a connector error (no SFTP subsystem, say) escape and
    # end the whole run; here it fails this host's operation, which rolls the host back.
    try:
        return host.put_file(StringIO(content), staged_path(path))
    except Exception as e:  # noqa: BLE001 - any transfer error fails the upload the same way
        host.log_styled(f"upload of {path} failed: {e}", fg="red")
        return False


@operation()
def _staged(files: list):
    for f in files:
        yield FunctionCommand(_upload, (f.path, f.content), {})


def stage(pf: Preflight) -> None:
    uploads = [f for f in pf.plan.swap if f.content is not None]  # a rollback copies its files on the host
    if uploads:  # one name on every host: pyinfra lists an operation once per name
        _staged(name="Upload the new files beside the live ones", files=uploads)
