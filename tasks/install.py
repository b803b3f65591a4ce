"""Install: back up what is there, then write the unit, its environment, the secret and the spec record.

Nothing here restarts anything: activate restarts only if one of these files changed.
"""

from __future__ import annotations

import hashlib
import time
from io import StringIO

from pyinfra import host
from pyinfra.api import FileUploadCommand, StringCommand, operation
from pyinfra.facts.files import File, Sha1File
from pyinfra.operations import files, server

from fleet import rollout
from fleet.render import render_env, render_secret, render_unit
from tasks.preflight import Preflight

CONFIG_DIR_MODE = "700"  # the secret's temp upload lands here too: nobody else may list it


def _sha1(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


@operation()
def secret_file(path: str, content: str | None):
    """files.put for a secret: 0600 from the first byte, and never shown, not even by --diff."""
    remote = host.get_fact(Sha1File, path=path)
    if content is None:
        if remote is not None:
            host.log(f"Will remove {path}")
            yield StringCommand("rm", "-f", path)
        return
    if remote != _sha1(content):
        host.log(f"Will write {path} (secret: content not shown)")
        temp = host.get_temp_filename(path, temp_directory=path.rsplit("/", 1)[0])
        yield StringCommand("install", "-m", "600", "/dev/null", temp)
        yield FileUploadCommand(StringIO(content), temp)
        yield StringCommand("mv", "-f", temp, path)
    elif (host.get_fact(File, path=path) or {}).get("mode") != 600:
        yield StringCommand("chmod", "600", path)


def desired_files(pf: Preflight) -> dict[str, str | None]:
    """path -> content (None: must not exist), from the spec alone."""
    spec = pf.spec
    return {
        spec.unit_file: render_unit(spec, pf.group),
        spec.env_file: render_env(spec),
        spec.secret_file: render_secret(spec),
        rollout.deployed_spec_file(spec): rollout.spec_record(spec, pf.group),
    }


def pending_changes(pf: Preflight) -> list[str]:
    """The managed files whose content on the host differs from the spec's."""
    changed = []
    for path, content in desired_files(pf).items():
        remote = pf.facts.deployed.file_sha1.get(path)
        if (content is None and remote is not None) or (content is not None and remote != _sha1(content)):
            changed.append(path)
    return changed


def service_files(pf: Preflight, backup_stamp: str) -> list:
    """Back up, then write. Returns the file operations, so activate can ask which ones changed."""
    spec = pf.spec
    server.shell(
        name="Back up the current unit, environment, secret and spec",
        commands=[rollout.backup_command(spec, backup_stamp)],
    )
    files.directory(name="Config directory", path="/etc/sglang", mode=CONFIG_DIR_MODE)
    files.directory(name="State directory", path=rollout.state_dir(spec), mode="700")
    want = desired_files(pf)
    ops = [
        files.put(name=f"Unit {spec.unit_file}", src=StringIO(want[spec.unit_file]), dest=spec.unit_file, mode="644"),
        files.put(name=f"Environment {spec.env_file}", src=StringIO(want[spec.env_file]), dest=spec.env_file, mode="644"),
        secret_file(name=f"Secret {spec.secret_file}", path=spec.secret_file, content=want[spec.secret_file]),
    ]
    # The spec record changes with the unit; it is not a reason to restart on its own.
    files.put(
        name="Spec record",
        src=StringIO(want[rollout.deployed_spec_file(spec)]),
        dest=rollout.deployed_spec_file(spec),
        mode="600",
    )
    return ops


def new_backup_stamp() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
