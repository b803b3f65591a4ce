"""lab/hf.py: the lab's Hugging Face repositories are real git repositories on branch main, made the same on
every machine (their shas pinned here), holding valid safetensors files; the draft's revisions differ as
documented (r2 other bytes, r3 a 24 MiB shard), the other target's draft declares it accepts little with the
lab's target; the controller's cache counts only a finished build."""

from __future__ import annotations

import json
import os
import struct
import subprocess
from pathlib import Path

import pytest

from lab import hf, provision, wheels

# What build() makes, by sha. A change to it must bump hf.CACHE_NAME (else a cached build of the old
# repositories would be served under the new shas' names): this pins both.
PINNED = ("hf-repos-2", {
    "lab/Qwen3-8B": ["4e1f16a3e8d4778ded06a2d5c9065776e643cbea"],
    "lab/Qwen3-8B-DFlash": ["81efd5c83b1a66daa592792f35106262c4279ed3", "157ba0f8a5819774c77756271a209ecbbe8e4244",
                            "a64c25b71589a02b8ce97f32b2376206f80c1292"],
    "lab/Qwen3-8B-Base-DFlash": ["ee7bb37d2be87fa4957fd33b5b8a5375afe2074a"],
})
MiB = 1 << 20


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", f"--git-dir={repo}", *args], capture_output=True, text=True, check=True,
                          env={"PATH": os.environ["PATH"], "GIT_CONFIG_NOSYSTEM": "1", "HOME": os.devnull}).stdout


def show(repo: Path, sha: str, path: str) -> bytes:
    return subprocess.run(["git", f"--git-dir={repo}", "show", f"{sha}:{path}"], capture_output=True,
                          check=True).stdout


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, dict[str, list[str]]]:
    dest = tmp_path_factory.mktemp("mirrors")
    return dest, hf.build(dest)


def files_at(root: Path, repo: str, sha: str) -> dict[str, int]:
    """path -> size of the tree at `sha`."""
    out = {}
    for line in git(hf.repo_dir(root, repo), "ls-tree", "-r", "-l", sha).splitlines():
        meta, path = line.split("\t")
        out[path] = int(meta.split()[3])
    return out


def check_safetensors(data: bytes) -> dict:
    """The file's header, after checking it is what the safetensors format says."""
    (n,) = struct.unpack("<Q", data[:8])
    assert n % 8 == 0 and 8 + n <= len(data)
    header = json.loads(data[8:8 + n])
    assert header.pop("__metadata__") == {"format": "pt"}
    end = 0
    for name, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"]):
        assert t["dtype"] == "BF16" and t["data_offsets"][0] == end, name
        count = 1
        for d in t["shape"]:
            count *= d
        end += 2 * count
        assert t["data_offsets"][1] == end, name
        body = data[8 + n + t["data_offsets"][0]:8 + n + end]
        exponents = {(hi & 0x7F) << 1 | lo >> 7 for lo, hi in zip(body[0:4096:2], body[1:4096:2])}
        assert 0xFF not in exponents and 0 not in exponents, f"{name}: a NaN, an infinity or a zero"
    assert 8 + n + end == len(data), "the buffer holds exactly the tensors"
    return header


def test_the_repositories_and_their_shas_are_pinned(built):
    _, revisions = built
    assert (hf.CACHE_NAME, revisions) == PINNED
    assert list(revisions) == list(hf.REPOS) == [hf.TARGET, hf.DRAFT, hf.OTHER_TARGETS_DRAFT]


def test_what_each_commit_holds_is_the_same_bytes_every_time():
    first, again = hf.commits(), hf.commits()
    assert first == again


def test_bare_on_branch_main_with_fixed_authors_and_dates(built):
    root, revisions = built
    for repo, shas in revisions.items():
        d = hf.repo_dir(root, repo)
        assert git(d, "rev-parse", "--is-bare-repository").strip() == "true"
        assert git(d, "symbolic-ref", "HEAD").strip() == "refs/heads/main"
        assert git(d, "for-each-ref", "--format=%(refname)").split() == ["refs/heads/main"]
        assert not (d / "index").exists()
        log = git(d, "log", "--reverse", "--format=%H|%an|%ae|%at|%cn|%ce|%ct", "main").splitlines()
        assert [line.split("|")[0] for line in log] == shas
        for i, line in enumerate(log):
            stamp = str(hf.FIRST_DATE + i * hf.DAY)
            assert line.split("|")[1:] == [*hf.AUTHOR, stamp, *hf.AUTHOR, stamp]


def test_the_target_is_a_sharded_qwen3_with_a_valid_index(built):
    root, revisions = built
    [sha] = revisions[hf.TARGET]
    d = hf.repo_dir(root, hf.TARGET)
    shards = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    sizes = files_at(root, hf.TARGET, sha)
    assert sorted(sizes) == sorted(["config.json", "generation_config.json", "tokenizer_config.json",
                                    "model.safetensors.index.json", *shards])
    assert all(MiB <= sizes[s] <= 2 * MiB for s in shards)
    assert json.loads(show(d, sha, "config.json")) == provision._target_config(hf.TARGET)
    index = json.loads(show(d, sha, "model.safetensors.index.json"))
    headers = {s: check_safetensors(show(d, sha, s)) for s in shards}
    assert index["weight_map"] == {name: s for s, h in headers.items() for name in h}
    assert index["metadata"]["total_size"] == sum(t["data_offsets"][1] - t["data_offsets"][0]
                                                  for h in headers.values() for t in h.values())


def test_the_drafts_revisions_differ_as_documented(built):
    root, revisions = built
    d = hf.repo_dir(root, hf.DRAFT)
    r1, r2, r3 = revisions[hf.DRAFT]
    blobs = {sha: dict(line.split(" ", 2)[2].split("\t")[::-1] for line in git(d, "ls-tree", sha).splitlines())
             for sha in (r1, r2, r3)}
    assert all(sorted(b) == ["config.json", "model.safetensors"] for b in blobs.values())
    # the same config throughout, provision's DFlash draft of the target's
    assert blobs[r1]["config.json"] == blobs[r2]["config.json"] == blobs[r3]["config.json"]
    assert json.loads(show(d, r1, "config.json")) == provision._draft_config(
        "dflash", provision._target_config(hf.TARGET), None)
    # r2: the same tensors, other bytes; r3: grown to about 24 MiB
    shard = {sha: show(d, sha, "model.safetensors") for sha in (r1, r2, r3)}
    headers = {sha: check_safetensors(data) for sha, data in shard.items()}
    assert headers[r1] == headers[r2] and shard[r1] != shard[r2] and len(shard[r1]) == len(shard[r2])
    assert MiB <= len(shard[r1]) <= 2 * MiB
    assert 23 * MiB <= len(shard[r3]) <= 25 * MiB and set(headers[r1]) < set(headers[r3])


def test_the_other_targets_draft_declares_it_accepts_little_with_the_labs_target(built):
    """lab/Qwen3-8B-Base-DFlash: the draft's files (its own bytes), its config the draft's but for lab_acceptance,
    which the SGLang double reads: 0.2 served with lab/Qwen3-8B as the deploy fetches it, 0.9 with its own."""
    root, revisions = built
    d = hf.repo_dir(root, hf.OTHER_TARGETS_DRAFT)
    [sha] = revisions[hf.OTHER_TARGETS_DRAFT]
    config = json.loads(show(d, sha, "config.json"))
    assert config.pop("lab_acceptance") == {"lab/Qwen3-8B-Base": 0.9, "lab/Qwen3-8B": 0.2}
    r1 = hf.repo_dir(root, hf.DRAFT), revisions[hf.DRAFT][0]
    assert config == json.loads(show(*r1, "config.json"))
    shard, r1_shard = show(d, sha, "model.safetensors"), show(*r1, "model.safetensors")
    assert check_safetensors(shard) == check_safetensors(r1_shard) and shard != r1_shard
    declared = json.loads(show(d, sha, "config.json"))
    served = f"{provision.MODELS_DIR}/{hf.TARGET}/{revisions[hf.TARGET][0]}"
    assert wheels.DOUBLE_LAB.declared_acceptance(declared, str(d), served) == 0.2
    assert wheels.DOUBLE_LAB.declared_acceptance(declared, str(d), f"{provision.MODELS_DIR}/lab/Qwen3-8B-Base/x") == 0.9


def test_the_cache_counts_a_finished_build_only_and_builds_once(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLANG_FLEET_CACHE", str(tmp_path))
    made = []

    def build(dest: Path) -> dict[str, list[str]]:
        made.append(dest)
        (hf.repo_dir(dest, "lab/X") / "HEAD").parent.mkdir(parents=True)
        (hf.repo_dir(dest, "lab/X") / "HEAD").write_text("ref: refs/heads/main\n")
        return {"lab/X": ["a" * 40]}

    monkeypatch.setattr(hf, "build", build)
    # an interrupted build, and a directory without its revisions.json, do not count
    (tmp_path / f"{hf.CACHE_NAME}.build" / "models").mkdir(parents=True)
    (tmp_path / hf.CACHE_NAME / "models").mkdir(parents=True)
    assert hf.cached() == tmp_path / hf.CACHE_NAME
    assert hf.revisions() == {"lab/X": ["a" * 40]} and len(made) == 1
    assert not (tmp_path / f"{hf.CACHE_NAME}.build").exists()
    hf.cached()
    assert len(made) == 1
    root = tmp_path / "host"
    assert hf.install(root, "/srv/hf-mirrors") == {"lab/X": ["a" * 40]}
    assert (root / "srv/hf-mirrors/models/lab/X/HEAD").read_text() == "ref: refs/heads/main\n"
