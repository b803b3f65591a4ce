"""What a rollout leaves on the host besides the unit: backups, a deploy record, a lock.

Shell snippets are built here from the spec so they are tested without hosts; the
task files only run them.

On the host, per service unit U:
  /var/lib/sglang-fleet/U/spec.json        the spec the deployed files came from
  /var/lib/sglang-fleet/U/backups/STAMP/   the files replaced by a rollout (last KEEP_BACKUPS)
  /var/lib/sglang-fleet/U/deploys.jsonl    one JSON record per rollout
  /run/sglang-fleet/U.lock/owner           who is deploying (gone on reboot)
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import time
from dataclasses import dataclass
from pathlib import PurePosixPath

from fleet.spec import ClassSpec

KEEP_BACKUPS = 5


def state_dir(spec: ClassSpec) -> str:
    return f"/var/lib/sglang-fleet/{spec.service.unit}"


def lock_dir(spec: ClassSpec) -> str:
    return f"/run/sglang-fleet/{spec.service.unit}.lock"


def deployed_spec_file(spec: ClassSpec) -> str:
    return f"{state_dir(spec)}/spec.json"


def managed_files(spec: ClassSpec) -> list[str]:
    """Everything a rollout replaces and a rollback puts back, the secret included."""
    return [spec.unit_file, spec.env_file, spec.secret_file, deployed_spec_file(spec)]


def spec_record(spec: ClassSpec, group: str) -> str:
    """The spec as deployed, for the host's record; SecretStr dumps as '**********'."""
    data = json.loads(spec.model_dump_json())
    return json.dumps({"group": group, "spec": data}, indent=2, sort_keys=True) + "\n"


def backup_command(spec: ClassSpec, stamp: str) -> str:
    """Copy the current files to backups/STAMP (0700), keep the last KEEP_BACKUPS; prints the dir or nothing."""
    d = shlex.quote(f"{state_dir(spec)}/backups/{stamp}")
    files = " ".join(shlex.quote(f) for f in managed_files(spec))
    root = shlex.quote(f"{state_dir(spec)}/backups")
    return (
        f"set -e; umask 077; mkdir -p {d}; for f in {files}; do if [ -e \"$f\" ]; then cp -p \"$f\" {d}/; fi; done; "
        f"if [ -z \"$(ls -A {d})\" ]; then rmdir {d}; else echo {d}; fi; "
        f"ls -1d {root}/*/ 2>/dev/null | sort | head -n -{KEEP_BACKUPS} | xargs -r rm -rf"
    )


def restore_command(spec: ClassSpec, backup: str) -> str:
    """Put every managed file back as it was in `backup`; files that did not exist then are removed."""
    parts = ["set -e"]
    for f in managed_files(spec):
        saved = shlex.quote(f"{backup}/{PurePosixPath(f).name}")
        parts.append(f"if [ -e {saved} ]; then cp -p {saved} {shlex.quote(f)}; else rm -f {shlex.quote(f)}; fi")
    return "; ".join(parts)


def record_command(spec: ClassSpec, record: dict) -> str:
    line = shlex.quote(json.dumps(record, sort_keys=True))
    # printf, not echo: dash's echo would turn the JSON's escapes into raw characters.
    return f"mkdir -p {shlex.quote(state_dir(spec))}; printf '%s\\n' {line} >> {shlex.quote(state_dir(spec) + '/deploys.jsonl')}"


def redact(text: str, spec: ClassSpec) -> str:
    """SGLang logs its server_args, API key included: never pass that on to the operator's terminal."""
    if spec.service.api_key is None:
        return text
    return text.replace(spec.service.api_key.get_secret_value(), "***")


def journal_command(spec: ClassSpec, lines: int = 30) -> str:
    return f"journalctl -u {shlex.quote(spec.service.unit + '.service')} -n {lines} --no-pager -o short-iso"


# --- the deploy lock -------------------------------------------------------------

def lock_owner() -> dict:
    """Who this deploy is, as written into the host's lock."""
    return {
        "holder": f"{os.environ.get('USER', 'root')}@{socket.gethostname()}",
        "pid": os.getpid(),
        "since": int(time.time()),
    }


@dataclass(frozen=True)
class LockState:
    held: bool
    stale: bool
    message: str


def judge_lock(owner_text: str, now: float, stale_after_s: float, pid_alive) -> LockState:
    """owner_text: the lock's owner file ('' = no lock). pid_alive(pid) -> bool, for holders on this machine."""
    if not owner_text.strip():
        return LockState(False, False, "")
    try:
        owner = json.loads(owner_text)
        holder, pid, since = owner["holder"], int(owner["pid"]), float(owner["since"])
    except (ValueError, KeyError, TypeError):
        return LockState(True, True, f"unreadable deploy lock ({owner_text.strip()[:80]!r})")
    age = now - since
    held_for = f"held by {holder} (pid {pid}) since {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(since))}"
    if holder.endswith("@" + socket.gethostname()) and not pid_alive(pid):
        return LockState(True, True, f"stale deploy lock {held_for}: that process is gone")
    if age > stale_after_s:
        return LockState(True, True, f"stale deploy lock {held_for}: older than {stale_after_s:g}s")
    return LockState(True, False, f"another deploy is running: lock {held_for}")


def stale_after(spec: ClassSpec) -> float:
    """No honest rollout holds the lock longer than two load timeouts (new + rollback) and a margin."""
    r = spec.readiness
    return 2 * r.load_timeout_s + r.workload_release_timeout_s + 600


def lock_command(spec: ClassSpec, owner: dict, take_over: bool) -> str:
    d = shlex.quote(lock_dir(spec))
    clear = f"rm -rf {d}; " if take_over else ""
    return (
        f"mkdir -p {shlex.quote(str(PurePosixPath(lock_dir(spec)).parent))}; {clear}"
        f"if mkdir {d} 2>/dev/null; then echo {shlex.quote(json.dumps(owner))} > {shlex.quote(lock_owner_file(spec))}; "
        f"else echo 'locked:'; cat {shlex.quote(lock_owner_file(spec))}; exit 1; fi"
    )


def unlock_command(spec: ClassSpec) -> str:
    return f"rm -rf {shlex.quote(lock_dir(spec))}"


def lock_owner_file(spec: ClassSpec) -> str:
    return f"{lock_dir(spec)}/owner"
