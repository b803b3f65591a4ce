"""The programs that run on the hosts are files of their own (fleet/programs/): the shell checked by
Debian's shellcheck, the Python by ruff, and each run here as the file it is: fetch_revision.py
(fleet.weights.hub.FETCH) against a stand-in huggingface_hub, lock.sh (fleet.rollout.lock's commands), restore.sh (a rollback's
restore of the files), begin.sh (a rollout's beginning) and bundle.sh (the monitoring host's configuration) on a
tmp dir, stop_processes.sh on
processes of its own. How the deploy sends them is tested
where their commands are (test_hub.py, test_lock.py, test_rollout.py)."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleet.core import controller, layout
from fleet.rollout import lock
from fleet.weights import hub
from fleet.spec import ClassSpec
from fleet.core.wire import frames

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = ROOT / "fleet" / "programs"
FETCH = PROGRAMS / "fetch_revision.py"
LOCK = PROGRAMS / "lock.sh"
RESTORE = PROGRAMS / "restore.sh"
BUNDLE = PROGRAMS / "bundle.sh"
BEGIN = PROGRAMS / "begin.sh"
STOP = PROGRAMS / "stop_processes.sh"
SHELL = sorted(PROGRAMS.glob("*.sh"))
PYTHON = sorted(PROGRAMS.glob("*.py"))


def test_there_are_programs():
    assert FETCH in PYTHON and {LOCK, BEGIN, RESTORE, STOP, BUNDLE} <= set(SHELL)


@pytest.mark.parametrize("path", SHELL, ids=lambda p: p.name)
def test_a_shell_program_is_sent_as_its_file_without_its_comments(path):
    kept = [ln for ln in path.read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert controller.shell(path.name, "a b", 1) == "( set -- 'a b' 1\n" + "\n".join(kept) + "\n)"


def test_the_shell_programs_pass_shellcheck():
    if shutil.which("shellcheck") is None:
        pytest.fail("shellcheck is missing: run `make host-packages` (Debian's shellcheck package)")
    done = subprocess.run(["shellcheck", "-s", "sh", *map(str, SHELL)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_python_programs_pass_ruff():
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--select", "E,F,W", "--line-length",
                           "120", *map(str, PYTHON)], capture_output=True, text=True, timeout=60)
    if "No module named ruff" in done.stderr:
        pytest.fail("ruff is missing from the venv: it is in the test extra (make venv, or pip install -e '.[test]')")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_python_programs_import_only_the_standard_library_and_the_client():
    """They run on a host: nothing of the deploy is there, only the stdlib and (the fetch) huggingface_hub."""
    for path in PYTHON:
        tree = ast.parse(path.read_text())
        found = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        found |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert all(n.level == 0 for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)), path
        assert found - set(sys.stdlib_module_names) <= {"huggingface_hub"}, (path, found)


# --- fetch_revision.py ------------------------------------------------------------------------

def test_fetch_is_the_file_sent_whole_with_the_deploys_constants():
    assert hub.FETCH == FETCH.read_text()
    constants = {t.id: ast.literal_eval(n.value) for n in ast.parse(hub.FETCH).body if isinstance(n, ast.Assign)
                 for t in n.targets if isinstance(t, ast.Name)}
    assert (constants["MANIFEST"], constants["LIMIT"]) == (hub.MANIFEST, hub.SAID_LIMIT)


# A stand-in huggingface_hub: the revision's files from the JSON file $FAKE_HUB names ({"sha", "files":
# {name: {"content", "lfs", "served"}}}): an LFS file's size and sha256 in the model info, a plain
# file's size and git blob id (its ETag) from its metadata; snapshot_download writes each file
# missing or of another size with its "served" content (its content unless given), as the real one.
FAKE_HUB = '''
import hashlib, json, os
from types import SimpleNamespace as NS

def _config():
    with open(os.environ["FAKE_HUB"]) as f:
        return json.load(f)

class HfApi:
    def model_info(self, repo, revision=None, files_metadata=False):
        c = _config()
        siblings = []
        for name, f in c["files"].items():
            data = f["content"].encode()
            lfs = {"sha256": hashlib.sha256(data).hexdigest()} if f.get("lfs") else None
            siblings.append(NS(rfilename=name, size=len(data) if lfs else None, lfs=lfs))
        return NS(sha=c["sha"], siblings=siblings)

def hf_hub_url(repo, name, revision=None):
    return name

def get_hf_file_metadata(url):
    data = _config()["files"][url]["content"].encode()
    return NS(size=len(data), etag='"%s"' % hashlib.sha1(b"blob %d\\0" % len(data) + data).hexdigest())

def snapshot_download(repo, revision=None, local_dir=None):
    for name, f in _config()["files"].items():
        data = f.get("served", f["content"]).encode()
        path = os.path.join(local_dir, name)
        if not os.path.exists(path) or os.path.getsize(path) != len(data):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as out:
                out.write(data)
'''
REV = "a" * 40
FILES = {"config.json": {"content": '{"model_type": "qwen3"}\n'},
         "model.safetensors": {"content": "weights " * 64, "lfs": True},
         "sub dir/tokenizer.json ": {"content": "{}\n"}}  # a name with its blanks: kept whole


@pytest.fixture
def client(tmp_path) -> Path:
    d = tmp_path / "client" / "huggingface_hub"
    d.mkdir(parents=True)
    (d / "__init__.py").write_text(FAKE_HUB)
    return d.parent


def run_fetch(tmp_path: Path, client: Path, files: dict = FILES, sha: str = REV,
              margin: int = 0) -> subprocess.CompletedProcess:
    """python3 fetch_revision.py REPO REVISION FINAL MARGIN STAGING, as fleet.weights.hub.fetch_command runs it."""
    config = tmp_path / "hub.json"
    config.write_text(json.dumps({"sha": sha, "files": files}))
    final = tmp_path / "models" / "org" / "name" / REV
    argv = ["org/name", REV, str(final), str(margin), layout.revision_partial(str(final))]
    return subprocess.run([sys.executable, str(FETCH), *argv], capture_output=True, text=True, timeout=60,
                          env={"PATH": os.environ["PATH"], "PYTHONPATH": str(client), "FAKE_HUB": str(config)})


def verify(path: Path, how: str = "file") -> str:
    program = [str(FETCH)] if how == "file" else ["-c", hub.FETCH]
    done = subprocess.run([sys.executable, *program, "--verify", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_fetch_run_as_a_file_fetches_checks_and_renames_into_place(tmp_path, client):
    done = run_fetch(tmp_path, client)
    assert done.returncode == 0, done.stderr
    got = hub.read_fetch(done.stdout)
    total = sum(len(f["content"]) for f in FILES.values())
    assert (got.outcome, got.files, got.total, got.downloaded) == ("new", 3, total, total)
    final = tmp_path / "models" / "org" / "name" / REV
    assert not Path(layout.revision_partial(str(final))).exists()
    lines = (final / hub.MANIFEST).read_text().splitlines()
    manifest = {line.split(" ", 2)[2]: line.split(" ", 2)[1] for line in lines}
    assert set(manifest) == set(FILES) and (final / "sub dir" / "tokenizer.json ").read_text() == "{}\n"
    weights = FILES["model.safetensors"]["content"].encode()
    assert manifest["model.safetensors"] == "sha256:" + hashlib.sha256(weights).hexdigest()
    assert manifest["config.json"].startswith("blob:")
    # --verify, run as the file and as make verify sends it (python3 -c FETCH): nothing differs, then each kind
    assert verify(final) == verify(final, "-c") == ""
    with open(final / "config.json", "r+b") as f:
        f.write(b"[")
    (final / "model.safetensors").write_bytes(b"short")
    (final / "sub dir" / "tokenizer.json ").unlink()
    assert verify(final) == verify(final, "-c") == (f"config.json: blob differs\nmodel.safetensors: 5 bytes, expected "
                                                    f"{len(weights)}\nsub dir/tokenizer.json : missing\n")


def test_the_fetch_resumes_from_its_partial(tmp_path, client):
    final = tmp_path / "models" / "org" / "name" / REV
    partial = Path(layout.revision_partial(str(final)))
    partial.mkdir(parents=True)
    (partial / "config.json").write_text(FILES["config.json"]["content"])  # complete: kept
    (partial / "model.safetensors").write_text("cut")  # cut short: fetched again
    got = hub.read_fetch(run_fetch(tmp_path, client).stdout)
    assert got.outcome == "new" and got.downloaded == got.total - len(FILES["config.json"]["content"])


@pytest.mark.parametrize("files, sha, margin, outcome", [
    ({**FILES, "model.safetensors": {**FILES["model.safetensors"], "served": "x" * 512}}, REV, 0, "integrity"),
    ({**FILES, "../escape": {"content": "x"}}, REV, 0, "unsafe"),
    (FILES, "b" * 40, 0, "error"),  # the endpoint answered another commit
    (FILES, REV, 1 << 60, "disk"),
])
def test_the_fetch_refuses_and_says_why(tmp_path, client, files, sha, margin, outcome):
    done = run_fetch(tmp_path, client, files, sha, margin)
    assert done.returncode == 0, done.stderr
    assert hub.read_fetch(done.stdout).outcome == outcome
    assert not (tmp_path / "models" / "org" / "name" / REV).exists()


def test_a_broken_client_is_said(tmp_path, client):
    (client / "huggingface_hub" / "__init__.py").write_text("raise ImportError('no such client')\n")
    got = hub.read_fetch(run_fetch(tmp_path, client).stdout)
    assert got.outcome == "client" and "ImportError: no such client" in got.said


@pytest.mark.parametrize("args, rc", [(["--help"], 0), ([], 2), (["--verify"], 2), (["r", REV, "/x", "many", "/y"], 2)])
def test_the_fetch_says_its_usage(args, rc):
    done = subprocess.run([sys.executable, str(FETCH), *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == rc and "usage: fetch_revision.py REPO REVISION" in (done.stdout + done.stderr)


# --- lock.sh ----------------------------------------------------------------------------------

def lock_sh(tmp: Path, action: str, *more: str) -> subprocess.CompletedProcess:
    root = tmp / "run" / "sglang-fleet"
    return subprocess.run(["sh", str(LOCK), action, str(root), str(root / "u.lock"), str(root / "u.lease"), "5", *more],
                          capture_output=True, text=True, timeout=30)


def test_the_lock_program_run_as_a_file_takes_renews_and_releases_the_lock(tmp_path):
    root = tmp_path / "run" / "sglang-fleet"
    owner = ["60", "4096", "absent", json.dumps("alice@laptop"), "7", "1750000000"]
    before = int(time.time())
    taken = lock_sh(tmp_path, "take", *owner)
    assert (taken.returncode, taken.stdout) == (0, lock.TAKEN_MARK + "\n"), taken.stderr
    text = (root / "u.lock").read_text()
    held = json.loads(text)
    assert (held["holder"], held["pid"], held["since"]) == ("alice@laptop", 7, 1750000000)
    assert before + 60 <= int((root / "u.lease").read_text()) <= int(time.time()) + 60
    # another that saw no lock: refused, told the lock's text; one that saw this lock takes it
    refused = lock_sh(tmp_path, "take", *owner)
    (said,) = frames(refused.stdout)
    assert refused.returncode == lock.REFUSED_EXIT and said.marker == lock.REFUSED_MARK and said.text == text
    assert lock_sh(tmp_path, "take", *owner[:2], "present:" + text.strip(), *owner[3:]).stdout == lock.TAKEN_MARK + "\n"
    # renewed (the same session: these commands run under the same processes), its session read
    (root / "u.lease").write_text("1\n")
    assert lock_sh(tmp_path, "renew", "60").stdout == lock.RENEWED_MARK + "\n"
    assert int((root / "u.lease").read_text()) >= before + 60
    assert lock_sh(tmp_path, "session").returncode in (0, 1)  # a start time, or none (no sshd above)
    (root / "u.lease").write_text(f"{before - 10}\n")
    assert lock_sh(tmp_path, "session").stdout == lock.LEASE_RAN_OUT + "\n"
    # released: lock and lease gone; then not ours to renew, and released again is nothing to do
    released = lock_sh(tmp_path, "release")
    assert released.returncode == 0 and not (root / "u.lock").exists() and not (root / "u.lease").exists()
    assert lock_sh(tmp_path, "renew", "60").stdout == lock.NOT_OURS_MARK + "\n"
    assert lock_sh(tmp_path / "none", "release").returncode == 0


def test_the_lock_program_leaves_another_sessions_lock(tmp_path):
    root = tmp_path / "run" / "sglang-fleet"
    root.mkdir(parents=True)
    (root / "u.lock").write_text(json.dumps({"holder": "bob@desk", "pid": 1, "since": 1, "session": 1,
                                             "session_start": 1}) + "\n")
    assert lock_sh(tmp_path, "renew", "60").stdout == lock.NOT_OURS_MARK + "\n"
    assert lock_sh(tmp_path, "release").returncode == 0 and (root / "u.lock").exists()


def test_the_lock_program_says_its_usage(tmp_path):
    done = lock_sh(tmp_path, "steal")
    assert done.returncode == 2 and done.stderr.startswith("usage: lock.sh take|renew|release|session")


def test_the_lock_commands_send_the_program_without_its_comments():
    spec = ClassSpec.model_validate({
        "gpu_class": {"accepted_models": ["NVIDIA H200"], "gpu_count": 1, "min_memory_mib": 1},
        "service": {"model_path": "/m", "served_model_name": "m"}})
    kept = [ln for ln in LOCK.read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    args = f"release {layout.LOCK_ROOT} {spec.lock_file} {layout.lease_file(spec.lock_file)} {lock.FLOCK_WAIT_S}"
    assert lock.release_command(spec) == f"( set -- {args}\n" + "\n".join(kept) + "\n)"


# --- restore.sh -------------------------------------------------------------------------------

def sha1(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def restore_sh(tmp: Path, stop: str, files: dict[str, str | None], backup: Path | None, enabled: str = "enabled"):
    """restore.sh run as the file, under umask 077, with a systemctl that logs its arguments; (the run, its log)."""
    bin_dir, log = tmp / "bin", tmp / "systemctl.log"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "systemctl").write_text(f"#!/bin/sh\necho \"$*\" >> {log}\n")
    (bin_dir / "systemctl").chmod(0o755)
    lines = "\n".join(f"{sha or '-'} {tmp / name}" for name, sha in files.items())
    done = subprocess.run(
        ["sh", "-c", 'umask 077; exec sh "$0" "$@"', str(RESTORE), str(tmp / "pending.json"), '{"phase": "rolling-back"}\n',
         stop, "sglang.service", str(tmp / "sglang.service"), enabled, str(backup) if backup else "", lines,
         str(tmp / "sglang.service"), str(tmp / "sglang.env.staged")],
        capture_output=True, text=True, timeout=30, env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    return done, (log.read_text().splitlines() if log.exists() else [])


def test_the_restore_program_run_as_a_file_puts_back_what_differs_and_says_which(tmp_path):
    backup = tmp_path / "backups" / "20260101T000000Z"
    backup.mkdir(parents=True)
    (backup / "sglang.service").write_text("old unit\n")
    (tmp_path / "sglang.service").write_text("new unit\n")  # differs: put back from the set, the service stopped first
    (tmp_path / "spec.json").write_text("same\n")  # as before: left alone
    (tmp_path / "new.env").write_text("added\n")  # absent before: removed
    (tmp_path / "sglang.env.staged").write_text("staged\n")
    files = {"sglang.service": sha1("old unit\n"), "spec.json": sha1("same\n"), "new.env": None}
    done, systemctl = restore_sh(tmp_path, "no", files, backup)
    assert done.returncode == 0, done.stderr
    assert done.stdout.rsplit("@@restored=", 1)[1].split() == [str(tmp_path / "sglang.service"), str(tmp_path / "new.env")]
    assert (tmp_path / "sglang.service").read_text() == "old unit\n" and not (tmp_path / "new.env").exists()
    assert (tmp_path / "spec.json").read_text() == "same\n" and not (tmp_path / "sglang.env.staged").exists()
    assert json.loads((tmp_path / "pending.json").read_text()) == {"phase": "rolling-back"}
    assert oct((tmp_path / "pending.json").stat().st_mode & 0o777) == "0o600"
    assert systemctl == ["stop -- sglang.service", "daemon-reload", "enable --quiet -- sglang.service"]
    again, systemctl_again = restore_sh(tmp_path, "no", files, backup, enabled="")  # repeatable: nothing differs now
    assert again.stdout.strip() == "@@restored=" and systemctl_again == systemctl


def test_the_restore_program_without_the_backup_it_needs_fails_and_says_so(tmp_path):
    (tmp_path / "sglang.service").write_text("new unit\n")
    done, systemctl = restore_sh(tmp_path, "yes", {"sglang.service": sha1("old unit\n")}, None)
    assert done.returncode == 1 and f"no backup of {tmp_path / 'sglang.service'}" in done.stderr
    assert (tmp_path / "sglang.service").read_text() == "new unit\n" and systemctl == ["stop -- sglang.service"]


# --- stop_processes.sh ------------------------------------------------------------------------

def started(*argv: str) -> tuple[subprocess.Popen, int]:
    """A real process and its start time (field 22 of /proc/PID/stat), once it runs what it was given."""
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
    for _ in range(500):  # exec'd within a moment: a poll with a bound, not a sleep through a window
        if "sleep" in Path(f"/proc/{p.pid}/cmdline").read_text():
            break
        time.sleep(0.02)
    return p, int(Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


def test_the_stop_program_run_as_a_file_terms_then_kills_and_leaves_a_reused_pid_alone():
    polite, polite_start = started("sleep", "60")
    stubborn, stubborn_start = started("sh", "-c", "trap '' TERM; sleep 60; :")
    other, other_start = started("sleep", "60")  # as if its pid were another process's: a start of its own
    try:
        done = subprocess.run(["sh", str(STOP), "0.05", str(polite.pid), str(polite_start), "1000000",
                               str(stubborn.pid), str(stubborn_start), "2", str(other.pid), str(other_start + 1), "0"],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert polite.wait(30) == -signal.SIGTERM and stubborn.wait(30) == -signal.SIGKILL
        assert other.poll() is None
    finally:
        for p in (polite, stubborn, other):
            p.kill()
            p.wait()


# --- bundle.sh --------------------------------------------------------------------------------

def bundle_sh(tmp: Path, *args: str, checks_pass: bool = True) -> subprocess.CompletedProcess:
    """bundle.sh run as the file, with a promtool and an amtool that pass (or fail) what they are given."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("promtool", "amtool"):
        (bin_dir / tool).write_text(f"#!/bin/sh\necho {tool} \"$@\" >> {tmp / 'checks.log'}\n"
                                    + ("exit 0\n" if checks_pass else "echo invalid >&2; exit 1\n"))
        (bin_dir / tool).chmod(0o755)
    return subprocess.run(["sh", str(BUNDLE), *args], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})


def test_the_bundle_program_run_as_a_file_stages_checks_and_swaps_the_live_link(tmp_path):
    bundles, live, me = tmp_path / "sglang-fleet.d", tmp_path / "sglang-fleet", str(os.getuid())
    for n, name in enumerate(("b1", "b2", "b3")):
        staging = bundles / f".{name}.tmp"
        staged = bundle_sh(tmp_path, "stage", str(bundles), str(staging), me, f"{staging}/", f"{staging}/rules")
        assert staged.returncode == 0, staged.stderr
        assert (staging / "rules").is_dir() and oct(staging.stat().st_mode & 0o777) == "0o700"
        (staging / "prometheus.yml").write_text(name)
        (staging / "alertmanager.yml").write_text(name)
        os.utime(staging, (1_750_000_000 + n, 1_750_000_000 + n))  # ls -t's order: each bundle newer than the last
        done = bundle_sh(tmp_path, "install", str(bundles), str(staging), name, str(live), "2", "prometheus.yml",
                         "alertmanager.yml")
        assert done.returncode == 0, done.stderr
        assert os.readlink(live) == str(bundles / name) and (live / "prometheus.yml").read_text() == name
        assert not staging.exists() and oct((bundles / name).stat().st_mode & 0o777) == "0o700"
    assert sorted(p.name for p in bundles.iterdir()) == ["b2", "b3"]  # the live one and the one before it
    assert (tmp_path / "checks.log").read_text().splitlines()[:2] == [
        f"promtool check config {bundles}/.b1.tmp/prometheus.yml", f"amtool check-config {bundles}/.b1.tmp/alertmanager.yml"]


def test_a_bundle_that_fails_its_check_changes_nothing_live(tmp_path):
    bundles, live, me = tmp_path / "sglang-fleet.d", tmp_path / "sglang-fleet", str(os.getuid())
    staging = bundles / ".bad.tmp"
    assert bundle_sh(tmp_path, "stage", str(bundles), str(staging), me, f"{staging}/").returncode == 0
    done = bundle_sh(tmp_path, "install", str(bundles), str(staging), "bad", str(live), "3", "prometheus.yml",
                     "alertmanager.yml", checks_pass=False)
    assert done.returncode != 0 and "invalid" in done.stderr
    assert not live.exists() and not (bundles / "bad").exists() and staging.is_dir()


def test_the_bundle_program_says_its_usage(tmp_path):
    done = bundle_sh(tmp_path, "steal", "a", "b")
    assert done.returncode == 2 and done.stderr.startswith("usage: bundle.sh stage|install")


# --- begin.sh ---------------------------------------------------------------------------------

def begin_sh(tmp: Path, seen: dict[str, str | None], copies: dict[str, str], stamp: str = "s3", keep: int = 1,
             pending: Path | None = None) -> subprocess.CompletedProcess:
    """begin.sh's begin run as the file under umask 077: the unit file and the env file managed, SEEN as preflight
    read them, COPIES (source -> managed path) staged, no unit checked, no secret, no tune mark."""
    managed = [tmp / "etc" / "sglang.service", tmp / "etc" / "sglang.env"]
    return subprocess.run(
        ["sh", "-c", 'umask 077; exec sh "$0" "$@"', str(BEGIN), "begin", str(tmp / "backups"), stamp, "yes", str(keep),
         "\n".join(map(str, managed)), "\n".join(f"{sha or ''} {tmp / p}" for p, sha in seen.items()), "", "100",
         str(tmp / "etc"), "700", "\n".join(f"{m}.staged" for m in managed),
         "\n".join(f"{tmp / s}\n{tmp / d}.staged" for d, s in copies.items()),
         str(pending or tmp / "etc" / "pending.json"), '{"phase": "begun"}\n', "", "", ""],
        capture_output=True, text=True, timeout=30)


def test_the_begin_program_stages_a_copy_before_its_own_backup_prunes_the_set_it_comes_from(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "sglang.service").write_text("live unit\n")
    for old in ("s1", "s2"):
        (tmp_path / "backups" / old).mkdir(parents=True)
        (tmp_path / "backups" / old / "sglang.service").write_text(f"{old} unit\n")
    done = begin_sh(tmp_path, {"etc/sglang.service": sha1("live unit\n"), "etc/sglang.env": None},
                    {"etc/sglang.service": "backups/s1/sglang.service"})
    assert done.returncode == 0 and done.stdout == f"{tmp_path / 'backups' / 's3'}\n", done.stderr
    assert (tmp_path / "etc" / "sglang.service.staged").read_text() == "s1 unit\n"  # staged before s1 was pruned
    assert sorted(p.name for p in (tmp_path / "backups").iterdir()) == ["s3"]
    assert (tmp_path / "backups" / "s3" / "sglang.service").read_text() == "live unit\n"
    assert json.loads((tmp_path / "etc" / "pending.json").read_text()) == {"phase": "begun"}


def test_the_begin_program_refuses_a_file_changed_since_preflight_and_changes_nothing(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "sglang.env").write_text("written since\n")
    done = begin_sh(tmp_path, {"etc/sglang.env": None}, {})
    assert done.returncode == 1 and done.stdout == f"@@changed={tmp_path / 'etc' / 'sglang.env'}\n"
    assert not (tmp_path / "backups").exists() and not (tmp_path / "etc" / "pending.json").exists()


def test_a_failure_after_its_backup_undoes_the_set_and_the_staged_copies(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "sglang.service").write_text("live unit\n")
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "sglang.service").write_text("old unit\n")
    done = begin_sh(tmp_path, {"etc/sglang.service": sha1("live unit\n")}, {"etc/sglang.service": "old/sglang.service"},
                    pending=tmp_path / "no such dir" / "pending.json")
    assert done.returncode == 1
    assert list((tmp_path / "backups").iterdir()) == [] and not (tmp_path / "etc" / "sglang.service.staged").exists()


GATE = PROGRAMS / "gate.sh"


def gate_sh(tmp: Path, codes: list[str], *args: str, systemctl: str = "ActiveState=active\\nSubState=running\\n"
            "MainPID=42\\nNRestarts=0\\nResult=success\\n") -> subprocess.CompletedProcess:
    """gate.sh run as a file, against a systemctl that prints `systemctl` and a curl that answers the next of
    `codes` (the last one repeats), each call logged."""
    bin_, left = tmp / "bin", tmp / "codes"
    bin_.mkdir(exist_ok=True)
    left.write_text("\n".join(codes) + "\n")
    (bin_ / "systemctl").write_text(f'#!/bin/sh\necho "systemctl $*" >> {tmp}/log\nprintf "{systemctl}"\n')
    (bin_ / "curl").write_text(f'#!/bin/sh\necho "curl $*" >> {tmp}/log\ncode=$(head -n 1 {left}); '
                               f'[ $(wc -l < {left}) -gt 1 ] && sed -i 1d {left}; printf "$code"\n')
    for p in bin_.iterdir():
        p.chmod(0o755)
    return subprocess.run(["sh", str(GATE), *args], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}"})


def test_the_gate_poll_run_as_a_file_observes_and_waits_for_a_change(tmp_path):
    from fleet.rollout import gate

    url = "http://[::1]:30000/health"
    seen = gate_sh(tmp_path, ["000"], "observe", "sglang.service", url)
    assert seen.returncode == 0 and seen.stdout.startswith(gate.OBSERVATION_MARK + "\n")
    assert gate.parse_observation(seen.stdout).health == 0
    log = (tmp_path / "log").read_text()
    assert "systemctl show -p ActiveState,SubState,MainPID,NRestarts,Result -- sglang.service" in log
    assert f"curl --noproxy * --globoff -s -o /dev/null -w %{{http_code}} --max-time 2 {url}" in log
    previous = gate.observation_text(seen.stdout)
    changed = gate_sh(tmp_path, ["000", "000", "503"], "wait", "sglang.service", url, previous, "30", "0.05")
    assert gate.parse_observation(changed.stdout).health == 503  # the first change, not the budget's end
    # nothing changes: it waits out its budget, then says the same observation
    same = gate_sh(tmp_path, ["503"], "wait", "sglang.service", url, gate.observation_text(changed.stdout), "1", "0.2")
    assert same.returncode == 0 and gate.observation_text(same.stdout) == gate.observation_text(changed.stdout)


def test_the_gate_poll_survives_set_e_and_a_bus_that_does_not_answer(tmp_path):
    """After the restart's `set -e`: a systemctl that fails and a port still closed (curl's exit 7) are an observation."""
    (tmp_path / "bin").mkdir()
    done = subprocess.run(["sh", "-c", f"set -e; sh -e {GATE} observe sglang.service http://127.0.0.1:9/health"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and "health=000\nprobe=7\n" in done.stdout
    failing = gate_sh(tmp_path, ["000"], "observe", "sglang.service", "http://127.0.0.1:9/health",
                      systemctl="Failed to connect to bus\\n\"; exit 1; \"")
    assert failing.returncode == 0 and failing.stdout.endswith("health=000\nprobe=0\n")


def test_the_gate_poll_says_an_unknown_action(tmp_path):
    done = gate_sh(tmp_path, ["200"], "poll", "sglang.service", "http://127.0.0.1:30000/health")
    assert done.returncode == 2 and done.stderr == "gate.sh: unknown action: poll\n"
