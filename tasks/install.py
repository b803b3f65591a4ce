"""Install: upload the new unit, environment, secret and spec record beside the live files.

Nothing live changes here: activate renames them into place. Uploads reuse what preflight
read of the host, so they cost no fact gathering of their own; the secret is uploaded into
a file begin made 0600, so it is never readable by others, not even for a moment.
"""

from __future__ import annotations

from io import StringIO

from pyinfra.api import FileUploadCommand, operation

from fleet.rollout import staged_path
from tasks.preflight import Preflight


@operation()
def _staged(files: list):
    for f in files:
        yield FileUploadCommand(StringIO(f.content), staged_path(f.path))


def stage(pf: Preflight) -> None:
    uploads = [f for f in pf.plan.swap if f.content is not None]
    if uploads:  # one name on every host: pyinfra lists an operation once per name
        _staged(name="Upload the new files beside the live ones", files=uploads)
