"""Models by repository and commit: the spec, fleet/weights/hub.py's readers and rules, and its fetch script
run for real: huggingface_hub (the client the deploy installs on hosts) against a real olah serving
the lab's generated repositories on loopback."""

from __future__ import annotations

import base64
import os
import platform
import shutil
import socket
import subprocess
import sys
import time

import pytest
import requests

from fleet.core import layout
from fleet.weights import hub
from fleet.spec.load import SpecError, validate_class
from fleet.weights.parse import parse_model_dirs
from facts.models import ModelDirs
from lab import hf, mirror
from tasks.hub import client_wheels

TARGET_REV = "4e1f16a3e8d4778ded06a2d5c9065776e643cbea"
SRC = "group_data/x.py"
GPU = {"accepted_models": ["NVIDIA RTX A6000"], "gpu_count": 2, "min_memory_mib": 48000}
SERVICE = {"model_path": "/root/models/Qwen3-8B", "served_model_name": "qwen3-8b"}


def spec_of(**over):
    data = {"gpu_class": GPU, "service": SERVICE, **over}
    return validate_class(SRC, data)


def one_problem(**over) -> str:
    with pytest.raises(SpecError) as e:
        spec_of(**over)
    (p,) = e.value.problems
    return p


# --- the spec ----------------------------------------------------------------------------

def test_a_model_by_repository_is_served_from_its_revision_directory():
    rev = "a" * 40
    svc = {k: v for k, v in SERVICE.items() if k != "model_path"}
    spec = spec_of(service={**svc, "model": {"repo": "z-lab/Qwen3.6-27B", "revision": rev}},
                   speculative={"algorithm": "DFLASH", "draft_model": {"repo": "z-lab/Qwen3.6-27B-DFlash", "revision": rev}},
                   hub={"models_dir": "/data/models"})
    assert spec.target_path == f"/data/models/z-lab/Qwen3.6-27B/{rev}"
    assert spec.draft_path == f"/data/models/z-lab/Qwen3.6-27B-DFlash/{rev}"
    assert spec.model_paths == [spec.target_path, spec.draft_path]
    assert list(spec.hub_models) == spec.model_paths
    assert hub.declared_weights(spec) == f"z-lab/Qwen3.6-27B@{rev} + z-lab/Qwen3.6-27B-DFlash@{rev}"


def test_a_path_and_a_repository_mixed():
    rev = "b" * 40
    spec = spec_of(speculative={"algorithm": "DFLASH", "draft_model": {"repo": "z-lab/d", "revision": rev}})
    assert spec.target_path == SERVICE["model_path"]
    assert list(spec.hub_models) == [f"/opt/sglang-fleet/models/z-lab/d/{rev}"]


@pytest.mark.parametrize("revision, why", [
    ("main", "a commit: its 40 lowercase hexadecimal digits"),
    ("A" * 40, "a commit"),
    ("a" * 39, "a commit"),
])
def test_a_revision_must_be_a_commit(revision, why):
    p = one_problem(speculative={"algorithm": "DFLASH", "draft_model": {"repo": "z-lab/d", "revision": revision}})
    assert "speculative.draft_model.revision" in p and why in p, p


@pytest.mark.parametrize("repo", ["Qwen3-8B", "a/b/c", "../etc", "a/..", "a/b--c", "a/b.git", "-a/b", "a/b ",
                                  "a/$(reboot)", "a/b\nc", "a/" + "x" * 97])
def test_a_repository_id_is_org_and_name(repo):
    p = one_problem(speculative={"algorithm": "DFLASH", "draft_model": {"repo": repo, "revision": "a" * 40}})
    assert "speculative.draft_model.repo" in p, p


def test_path_and_repository_are_exclusive():
    p = one_problem(speculative={"algorithm": "DFLASH", "draft_model_path": "/d",
                                 "draft_model": {"repo": "z-lab/d", "revision": "a" * 40}})
    assert "exactly one of draft_model_path" in p
    p = one_problem(service={**SERVICE, "model": {"repo": "z-lab/t", "revision": "a" * 40}})
    assert "exactly one of model_path" in p


@pytest.mark.parametrize("hub_data, field", [
    ({"endpoint": "ftp://mirror"}, "hub.endpoint"),
    ({"endpoint": "https://user:pw@hub.internal"}, "hub.endpoint"),
    ({"token": "hf_abcdefgh"}, "hub.token"),
    ({"client": "huggingface_hub>=2"}, "hub.client"),
    ({"client": "requests==2.32.0"}, "hub.client"),
    ({"max_parallel": 0}, "hub.max_parallel"),
    ({"models_dir": "models"}, "hub.models_dir"),
])
def test_hub_refused(hub_data, field):
    p = one_problem(hub=hub_data)
    assert p.startswith(f"{SRC}: {field}"), p
    assert "hf_abcdefgh" not in p  # a token put where its source goes is not echoed


# --- readers and rules ---------------------------------------------------------------------

def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.mark.parametrize("answer, outcome, extra", [
    ("@@fetched=already\n", "already", {}),
    ("@@sizes=2 100 0 5000\n@@fetched=100 100\n", "new", {"files": 2, "total": 100, "downloaded": 100}),
    ("@@busy\n", "busy", {}),
    (f"@@client=broken\n{_b64('ModuleNotFoundError: x')}\n", "client", {"said": "ModuleNotFoundError: x"}),
    (f"@@unsafe\n{_b64('../x')}\n", "unsafe", {"said": "../x"}),
    (f"@@sizes=1 9 0 5\n@@integrity=1\n{_b64('a: sha256 differs')}\n", "integrity", {"said": "a: sha256 differs"}),
    ("@@sizes=1 900 0 5\n@@disk=5 1000\n", "disk", {"free": 5, "need": 1000, "total": 900}),
    (f"@@error=metadata\n{_b64('HTTPError: 401')}\n", "error", {"stage": "metadata", "said": "HTTPError: 401"}),
    ("@@sizes=1 900 0 5\n@@exit=137\n", "killed", {"said": "exit 137"}),
    ("garbage\n", "no answer", {}),
    ("@@sizes=x y\n@@fetched=1e9 -1\n", "new", {"files": None, "total": None}),
])
def test_read_fetch(answer, outcome, extra):
    done = hub.read_fetch(answer)
    assert done.outcome == outcome
    for k, v in extra.items():
        assert getattr(done, k) == v, k


def test_read_survey_keeps_only_revision_directories():
    names = ["1700000000 lab/t/" + "a" * 40, "1700000001 lab/t/" + "b" * 40, "17 lab/t/../../etc",
             "x lab/t/" + "c" * 40, "1700000002 lab/t/" + "d" * 39]
    uses = ["/m/lab/t/" + "a" * 40, "/elsewhere/lab/t/" + "b" * 40, "/m/lab/t/zz"]
    answer = f"@@client=yes\n@@revisions\n{_b64(chr(10).join(names))}\n@@uses\n{_b64(chr(10).join(uses))}\n"
    s = hub.read_survey(answer, "/m")
    assert s.client
    assert s.revisions == {"lab/t/" + "a" * 40: 1700000000, "lab/t/" + "b" * 40: 1700000001}
    assert s.uses == {"lab/t/" + "a" * 40}
    assert not hub.read_survey("", "/m").client


def test_to_remove_keeps_used_declared_and_the_newest():
    from fleet.spec import HubModel
    revs = {f"lab/t/{c * 40}": 1000 + i for i, c in enumerate("abcde")} | {"lab/o/" + "f" * 40: 1}
    survey = hub.Survey(True, revs, frozenset({"lab/t/" + "a" * 40}))
    declared = [HubModel(repo="lab/t", revision="e" * 40)]
    # a used, e declared; of b c d the newest (d) kept; another repository's never touched
    assert hub.to_remove(survey, declared, keep=1) == ["lab/t/" + "c" * 40, "lab/t/" + "b" * 40]
    assert hub.to_remove(survey, declared, keep=5) == []


def test_served_weights_from_the_arguments():
    rev = "a" * 40
    argv = ["--model-path", f"/m/lab/t/{rev}", "--speculative-draft-model-path", "/root/models/d"]
    assert hub.served_weights(argv, "/m") == f"lab/t@{rev[:12]}"
    assert hub.served_weights(["--model-path", "/root/x"], "/m") == "-"
    assert hub.served_weights(None, "/m") == "-"
    assert hub.served_weights(["--model-path"], "/m") == "-"


def test_remove_command_refuses_names_that_are_no_revision():
    cmd = hub.remove_command("/m", ["lab/t/" + "a" * 40, "lab/t/../../etc", "x"])
    assert cmd.count("rm -rf") == 1 and "etc" not in cmd


# --- the fetch, for real ---------------------------------------------------------------------

PY = f"{sys.version_info.major}.{sys.version_info.minor}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):
    """A real olah on loopback serving the lab's repositories; the client installed as hosts get it."""
    if platform.machine() != "x86_64":
        # allowed: the deploy downloads the client's wheels for x86_64 hosts only (tasks.hub.PLATFORMS), so on a
        # controller of another architecture they cannot run here; CI's machine is x86_64, where this runs
        pytest.skip("the client's wheels are downloaded for x86_64 hosts")
    root = tmp_path_factory.mktemp("hub")
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--disable-pip-version-check"]
    subprocess.run([*pip, "--find-links", str(mirror.cached_olah(PY)[0].parent), "--target", str(root / "olah"),
                    f"olah=={mirror.OLAH_VERSION}"], check=True)
    wheels = root / "wheels"
    wheels.mkdir()
    for w in client_wheels("huggingface_hub==2.4.0"):
        shutil.copy(w, wheels)
    subprocess.run([*pip, "--find-links", str(wheels), "--target", str(root / "client"), "huggingface_hub==2.4.0"],
                   check=True)
    port = _free_port()
    (root / "olah.toml").write_text(f'[basic]\nhost = "127.0.0.1"\nport = {port}\nrepos-path = "{root}/cache"\n'
                                    f'mirrors-path = ["{hf.cached()}"]\n[accessibility]\noffline = true\n')
    log = open(root / "olah.log", "w")
    server = subprocess.Popen([sys.executable, "-m", "olah.server", "-c", str(root / "olah.toml"),
                               "--log-path", str(root / "logs")], cwd=root, stdout=log, stderr=subprocess.STDOUT,
                              env={**os.environ, "PYTHONPATH": str(root / "olah")})
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            requests.get(url, timeout=1)
            break
        except requests.ConnectionError:
            time.sleep(0.1)
    yield {"url": url, "client": root / "client", "root": root, "server": server}
    server.terminate()
    server.wait(10)
    log.close()


def fetch(endpoint, tmp_path, repo: str, revision: str, margin: int = 0, url: str | None = None) -> hub.Fetched:
    final = tmp_path / "models" / repo / revision
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(endpoint["client"]), "HF_ENDPOINT": url or endpoint["url"],
           "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
    done = subprocess.run([sys.executable, "-c", hub.FETCH, repo, revision, str(final), str(margin),
                           layout.revision_partial(str(final))], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return hub.read_fetch(done.stdout)


def revision(repo: str, i: int) -> str:
    return hf.revisions()[repo][i]


def committed(repo: str, rev: str, name: str) -> bytes:
    return subprocess.run(["git", "--git-dir", str(hf.repo_dir(hf.cached(), repo)), "show", f"{rev}:{name}"],
                          capture_output=True, check=True).stdout


def models_of(tmp_path, path: str):
    out = subprocess.run(["sh", "-c", ModelDirs().command([path], [path])], capture_output=True, text=True).stdout
    return parse_model_dirs(out)[path]


def test_fetched_whole_then_complete_with_its_manifest(endpoint, tmp_path):
    rev = revision(hf.TARGET, 0)
    done = fetch(endpoint, tmp_path, hf.TARGET, rev)
    assert done.outcome == "new" and done.downloaded == done.total and done.files >= 4
    final = tmp_path / "models" / hf.TARGET / rev
    assert not (final.parent / f".{rev}.partial").exists()
    manifest = (final / hub.MANIFEST).read_text().splitlines()
    assert len(manifest) == done.files
    for line in manifest:
        size, digest, name = line.split(" ", 2)
        assert digest.startswith("blob:")  # olah's ETag of a plain git file: its blob id
        assert (final / name).read_bytes() == committed(hf.TARGET, rev, name)
    assert models_of(tmp_path, str(final)).status == "ok"
    assert subprocess.run(hub.verify_command(str(final), sys.executable), shell=True, capture_output=True,
                          text=True).stdout == ""


def test_a_truncated_file_is_fetched_again_beside_the_damaged_copy(endpoint, tmp_path):
    rev = revision(hf.DRAFT, 0)
    fetch(endpoint, tmp_path, hf.DRAFT, rev)
    final = tmp_path / "models" / hf.DRAFT / rev
    shard = next(final.glob("*.safetensors"))
    with open(shard, "r+b") as f:
        f.truncate(100)
    seen = models_of(tmp_path, str(final))
    assert seen.status == "damaged" and shard.name in seen.message
    done = fetch(endpoint, tmp_path, hf.DRAFT, rev)
    assert done.outcome == "new" and 0 < done.downloaded < done.total  # only the truncated shard again
    assert shard.read_bytes() == committed(hf.DRAFT, rev, shard.name)
    assert models_of(tmp_path, str(final)).status == "ok"


def test_an_altered_file_of_the_right_size_is_found_and_fetched_again(endpoint, tmp_path):
    rev = revision(hf.DRAFT, 1)
    fetch(endpoint, tmp_path, hf.DRAFT, rev)
    final = tmp_path / "models" / hf.DRAFT / rev
    shard = next(final.glob("*.safetensors"))
    with open(shard, "r+b") as f:
        f.seek(4096)
        f.write(b"\xff\xfe")
    differ = subprocess.run(hub.verify_command(str(final), sys.executable), shell=True, capture_output=True,
                            text=True).stdout
    assert differ == f"{shard.name}: blob differs\n"
    (final / hub.MANIFEST).unlink()  # what the next run then finds: no manifest, fetched again
    assert models_of(tmp_path, str(final)).status == "no manifest"
    assert fetch(endpoint, tmp_path, hf.DRAFT, rev).outcome == "new"
    assert shard.read_bytes() == committed(hf.DRAFT, rev, shard.name)


@pytest.mark.parametrize("damage", ["garbage line", "digest ab:cd", "size x", "no name"])
def test_a_manifest_of_another_form_reads_as_damaged_and_is_fetched_again(endpoint, tmp_path, damage):
    """A line fetch_revision.py never writes: make verify says so (no traceback), preflight finds the revision
    damaged, and the fetch does it again, its manifest whole once more."""
    rev = revision(hf.DRAFT, 0)
    fetch(endpoint, tmp_path, hf.DRAFT, rev)
    final = tmp_path / "models" / hf.DRAFT / rev
    whole = (final / hub.MANIFEST).read_text()
    size, digest, name = whole.splitlines()[0].split(" ", 2)
    line = {"garbage line": "\u00b2\u00b2 \x00garbage", "digest ab:cd": f"{size} ab:cd {name}",
            "size x": f"x {digest} {name}", "no name": f"{size} {digest}"}[damage]
    (final / hub.MANIFEST).write_text(whole + line + "\n")
    done = subprocess.run(hub.verify_command(str(final), sys.executable), shell=True, capture_output=True, text=True)
    assert done.returncode == 0 and "not SIZE DIGEST NAME (sha256:HEX64, blob:HEX40 or -): damaged" in done.stdout, \
        done.stdout + done.stderr
    seen = models_of(tmp_path, str(final))
    assert seen.status == "damaged" and "a line of another form" in seen.message, seen
    assert fetch(endpoint, tmp_path, hf.DRAFT, rev).outcome == "new"
    assert (final / hub.MANIFEST).read_text() == whole and models_of(tmp_path, str(final)).status == "ok"


def test_an_interrupted_fetch_resumes_from_its_partial(endpoint, tmp_path):
    rev = revision(hf.TARGET, 0)
    partial = tmp_path / "models" / hf.TARGET / f".{rev}.partial"
    partial.mkdir(parents=True)
    name = "config.json"
    (partial / name).write_bytes(committed(hf.TARGET, rev, name))
    (partial / "model-00001-of-00002.safetensors").write_bytes(b"half")  # cut short: dropped, fetched again
    done = fetch(endpoint, tmp_path, hf.TARGET, rev)
    assert done.outcome == "new" and done.downloaded == done.total - len(committed(hf.TARGET, rev, name))
    assert not partial.exists()
    assert models_of(tmp_path, str(partial.parent / rev)).status == "ok"


@pytest.mark.parametrize("repo, rev, said", [
    (hf.DRAFT, "1" * 40, "500"),  # olah's answer to a commit its repository lacks
    ("lab/nothing-here", TARGET_REV, "RemoteEntryNotFoundError"),
])
def test_an_unknown_revision_or_repository_fetches_nothing(endpoint, tmp_path, repo, rev, said):
    done = fetch(endpoint, tmp_path, repo, rev)
    assert done.outcome == "error" and done.stage == "metadata" and said in done.said
    assert not (tmp_path / "models" / repo / rev).exists()


def test_too_little_disk_fetches_nothing(endpoint, tmp_path):
    rev = revision(hf.DRAFT, 2)
    done = fetch(endpoint, tmp_path, hf.DRAFT, rev, margin=1 << 50)
    assert done.outcome == "disk" and done.need > done.free and done.total > 0
    assert not any((tmp_path / "models" / hf.DRAFT / f".{rev}.partial").iterdir())


def test_an_endpoint_that_does_not_answer(endpoint, tmp_path):
    done = fetch(endpoint, tmp_path, hf.DRAFT, revision(hf.DRAFT, 0), url=f"http://127.0.0.1:{_free_port()}")
    assert done.outcome == "error" and "Connect" in done.said


# --- branches ------------------------------------------------------------------------------

def by_branch(branch: str = "main", **more):
    return spec_of(speculative={"algorithm": "DFLASH", "draft_model": {"repo": "z-lab/d", "branch": branch, **more}},
                   hub={"endpoint": "http://hub.internal:8090/"})


@pytest.fixture
def run_resolved():
    return {}  # a run's resolved branches


def test_a_branch_is_resolved_once_per_run_and_served_at_its_commit(run_resolved):
    # two runs share nothing: another run's resolved branches are its own
    other_run: dict = {}
    asked = []

    def get(url, token):
        asked.append((url, token))
        return 200, b'{"id": "z-lab/d", "sha": "' + b"c" * 40 + b'", "siblings": []}'

    spec = by_branch("refs/pr/1")
    assert spec.branches and spec.service.model is None
    with pytest.raises(ValueError, match="branch refs/pr/1 is not resolved"):
        spec.draft_path
    pinned, problems = hub.pin_branches(spec, "hf_secret", run_resolved, get)
    assert problems == [] and pinned.draft_path == "/opt/sglang-fleet/models/z-lab/d/" + "c" * 40
    assert pinned.speculative.draft_model.describe() == "z-lab/d@cccccccccccc (branch refs/pr/1)"
    assert asked == [("http://hub.internal:8090/api/models/z-lab/d/revision/refs%2Fpr%2F1", "hf_secret")]
    again, _ = hub.pin_branches(by_branch("refs/pr/1"), None, run_resolved, get)  # the next host: the same commit, no request
    assert again == pinned and len(asked) == 1
    assert hub.pin_branches(by_branch("refs/pr/1"), None, other_run, get)[0] == pinned and len(asked) == 2
    # a revision declared with its branch: served at that commit, nothing asked
    both = by_branch(revision="d" * 40)
    assert hub.pin_branches(both, None, run_resolved, get) == (both, []) and len(asked) == 2


@pytest.mark.parametrize("answer, found", [
    ((401, b'{"error": "Invalid credentials"}'), "HTTP 401: "),
    ((200, b"<html>"), "no model info"),
    ((200, b'{"sha": "main"}'), "no commit in its model info (sha 'main')"),
    ((200, b'["sha"]'), "no model info"),
    (requests.ConnectionError("refused"), "ConnectionError: 'refused'"),
])
def test_a_branch_that_cannot_be_resolved_is_named(run_resolved, answer, found):
    def get(url, token):
        if isinstance(answer, Exception):
            raise answer
        return answer

    spec = by_branch()
    same, problems = hub.pin_branches(spec, None, run_resolved, get)
    assert same is spec and len(problems) == 1
    assert problems[0].startswith(f"z-lab/d: branch main: expected its commit from http://hub.internal:8090, found {found}")
    assert run_resolved == {}


@pytest.mark.parametrize("branch", ["-x", "/main", "a..b", "a//b", "main/", "x.lock", "a b", "a\nb", ""])
def test_a_branch_name_git_would_refuse(branch):
    p = one_problem(speculative={"algorithm": "DFLASH", "draft_model": {"repo": "z-lab/d", "branch": branch}})
    assert "speculative.draft_model.branch" in p, p


def test_neither_commit_nor_branch():
    p = one_problem(speculative={"algorithm": "DFLASH", "draft_model": {"repo": "z-lab/d"}})
    assert "revision (a commit, its 40 hex digits) or, declared as such, branch" in p


def test_the_real_endpoint_names_main_s_newest_commit(endpoint, run_resolved):
    spec = spec_of(speculative={"algorithm": "DFLASH", "draft_model": {"repo": hf.DRAFT, "branch": "main"}},
                   hub={"endpoint": endpoint["url"]})
    pinned, problems = hub.pin_branches(spec, None, run_resolved)
    assert problems == [] and pinned.speculative.draft_model.revision == revision(hf.DRAFT, -1)
    _, problems = hub.pin_branches(spec_of(speculative={"algorithm": "DFLASH", "draft_model": {
        "repo": hf.DRAFT, "branch": "nope"}}, hub={"endpoint": endpoint["url"]}), None, run_resolved)
    assert problems and "HTTP 401" in problems[0], problems


def test_the_hub_token_for_status_and_verify_is_read_where_it_can_be():
    from fleet.spec.secrets import SecretError, Secrets, hub_token, resolve
    spec = spec_of(hub={"token": {"env": "HF_TOKEN_TEST"}},
                   speculative={"algorithm": "DFLASH", "draft_model": {"repo": "z-lab/d", "branch": "main"}})
    assert hub_token(spec, {"HF_TOKEN_TEST": "hf_abc"}) == "hf_abc" and hub_token(spec, {}) is None
    assert resolve(spec, SRC, {"HF_TOKEN_TEST": "hf_abc"}) == Secrets({}, {}, "hf_abc")
    assert "hf_abc" in Secrets({}, {}, "hf_abc").values()  # redacted wherever secrets are
    with pytest.raises(SecretError, match="hub.token: environment variable HF_TOKEN_TEST"):
        resolve(spec, SRC, {})
    assert resolve(spec_of(hub={"token": {"env": "HF_TOKEN_TEST"}}), SRC, {}) == Secrets()  # no model to fetch
