"""Hugging Face model repositories for the lab's Hugging Face mirror (olah on a mirror host, lab/mirror.py):
real git repositories in Hugging Face's own formats, made here on the controller, deterministic (fixed
author, committer, dates and messages; bytes from a hash of their names), so that their commit shas are
the same on every machine and every build.

  lab/Qwen3-8B          a target: config.json (provision's Qwen3 dense config), generation_config.json,
                        tokenizer_config.json, model.safetensors.index.json and two safetensors shards
                        (1.75 MiB each); one commit
  lab/Qwen3-8B-DFlash   a DFlash draft of it (provision's draft config): config.json and model.safetensors,
                        three commits, oldest first:
                          r1  the shard, 1 MiB
                          r2  the same tensors with other bytes: a new revision of the draft
                          r3  the shard grown to 24 MiB, so that a throttled fetch (Lab.throttle) lasts seconds

  lab/Qwen3-8B-Base-DFlash  a DFlash draft trained for another target, lab/Qwen3-8B-Base: the same files as
                        the draft's r1 (other bytes), its config.json declaring (lab_acceptance, lab/doubles/README.md)
                        0.9 with lab/Qwen3-8B-Base and 0.2 with lab/Qwen3-8B: served with lab/Qwen3-8B it loads and
                        serves, and accepts little; one commit

The branch is `main` (olah fails with `master`). Built once into ${SGLANG_FLEET_CACHE:-~/.cache/sglang-fleet}/
<CACHE_NAME>/ as bare repositories under models/<org>/<name> (olah's <mirrors-path>/models/<org>/<name>),
with revisions.json, written last, marking a finished build; a mirror host gets a copy at each `up`.

    .venv/bin/python -m lab.hf [DEST]     # build into DEST (default: the cache) and print the revisions
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab import base, wheels

TARGET = "lab/Qwen3-8B"
DRAFT = "lab/Qwen3-8B-DFlash"
OTHER_TARGETS_DRAFT = "lab/Qwen3-8B-Base-DFlash"
REPOS = (TARGET, DRAFT, OTHER_TARGETS_DRAFT)
# what OTHER_TARGETS_DRAFT declares it accepts, by target (the SGLang double serves it so)
OTHER_TARGETS_ACCEPTANCE = {"lab/Qwen3-8B-Base": 0.9, TARGET: 0.2}
CACHE_NAME = "hf-repos-2"  # bump whenever what build() makes changes, so the cache is made again
AUTHOR = ("sglang-fleet lab", "lab@sglang-fleet.invalid")
FIRST_DATE = 1767225600  # 2026-01-01T00:00:00Z; each commit a day after the one before
DAY = 86400


class HfRepoError(RuntimeError):
    pass


# --- safetensors -----------------------------------------------------------------------

# bf16 from hash bytes: each element's high byte (little-endian: the odd one) keeps its sign and gets the
# exponent 120..123, so every value is finite and small, 2^-7 <= |x| < 2^-3, as trained weights are.
_HIGH = bytes((b & 0x80) | 0x3C | ((b >> 3) & 1) for b in range(256))
_ONE = b"\x80\x3f"  # bf16 1.0, little-endian: a norm's weight


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]
    fill: str = "random"  # "random" | "ones"

    @property
    def nbytes(self) -> int:
        n = 2  # BF16
        for d in self.shape:
            n *= d
        return n

    def data(self, seed: str) -> bytes:
        if self.fill == "ones":
            return _ONE * (self.nbytes // 2)
        raw = bytearray(hashlib.shake_256(f"{seed}:{self.name}".encode()).digest(self.nbytes))
        raw[1::2] = bytes(raw[1::2]).translate(_HIGH)
        return bytes(raw)


def safetensors(tensors: list[Tensor], seed: str) -> bytes:
    """A safetensors file: the header's length (8 bytes, little-endian), the JSON header (dtype, shape,
    data_offsets into the buffer that follows; padded with spaces to 8 bytes), then the tensors' bytes."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for t in tensors:
        header[t.name] = {"dtype": "BF16", "shape": list(t.shape), "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(t.data(seed) for t in tensors)


def read_safetensors_header(data: bytes) -> dict[str, Any]:
    """The JSON header of a safetensors file's bytes (tests, and a check of what build() wrote)."""
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n])


# --- the repositories ---------------------------------------------------------------------

HIDDEN = 512
VOCAB = 512  # the stored embeddings' rows: a slice of the config's, to keep the files small


def _layer(i: int, prefix: str = "model.") -> list[Tensor]:
    p = f"{prefix}layers.{i}."
    return [Tensor(p + "input_layernorm.weight", (HIDDEN,), "ones"),
            Tensor(p + "self_attn.q_proj.weight", (HIDDEN, HIDDEN)),
            Tensor(p + "self_attn.k_proj.weight", (HIDDEN // 4, HIDDEN)),
            Tensor(p + "self_attn.v_proj.weight", (HIDDEN // 4, HIDDEN)),
            Tensor(p + "self_attn.o_proj.weight", (HIDDEN, HIDDEN))]


def _target_shards() -> dict[str, list[Tensor]]:
    return {
        "model-00001-of-00002.safetensors": [Tensor("model.embed_tokens.weight", (VOCAB, HIDDEN)), *_layer(0)],
        "model-00002-of-00002.safetensors": [*_layer(1), Tensor("model.norm.weight", (HIDDEN,), "ones"),
                                             Tensor("lm_head.weight", (VOCAB, HIDDEN))],
    }


def _draft_tensors(big: bool) -> list[Tensor]:
    tensors = [Tensor("fc.weight", (HIDDEN, 2 * HIDDEN)), Tensor("hidden_norm.weight", (HIDDEN,), "ones"),
               Tensor("norm.weight", (HIDDEN,), "ones")]
    if big:  # 23 MiB more: four layers' MLPs
        for i in range(4):
            tensors += [Tensor(f"layers.{i}.mlp.{m}_proj.weight", shape)
                        for m, shape in (("gate", (1024, 1024)), ("up", (1024, 1024)), ("down", (1024, 920)))]
    return tensors


def _json(data: Any) -> bytes:
    return (json.dumps(data, indent=2) + "\n").encode()


def _target_files() -> dict[str, bytes]:
    from lab.provision import _target_config  # here: provision imports this module

    config = _target_config(TARGET)
    shards = _target_shards()
    files = {
        "config.json": _json(config),
        "generation_config.json": _json({"bos_token_id": 151643, "do_sample": True, "eos_token_id": [151645, 151643],
                                         "pad_token_id": 151643, "temperature": 0.6, "top_k": 20, "top_p": 0.95,
                                         "transformers_version": config["transformers_version"]}),
        "tokenizer_config.json": _json({"add_bos_token": False, "bos_token": None, "eos_token": "<|im_end|>",
                                        "model_max_length": 131072, "pad_token": "<|endoftext|>",
                                        "tokenizer_class": "Qwen2Tokenizer"}),
        "model.safetensors.index.json": _json({
            "metadata": {"total_size": sum(t.nbytes for ts in shards.values() for t in ts)},
            "weight_map": dict(sorted((t.name, shard) for shard, ts in shards.items() for t in ts))}),
    }
    for shard, tensors in shards.items():
        files[shard] = safetensors(tensors, f"{TARGET}@r1:{shard}")
    return files


def _draft_commits() -> list[tuple[str, dict[str, bytes]]]:
    from lab.provision import _draft_config, _target_config

    config = _json(_draft_config("dflash", _target_config(TARGET), None))
    return [
        ("r1: the DFlash draft of lab/Qwen3-8B",
         {"config.json": config, "model.safetensors": safetensors(_draft_tensors(False), f"{DRAFT}@r1")}),
        ("r2: retrained: the same tensors, other weights",
         {"config.json": config, "model.safetensors": safetensors(_draft_tensors(False), f"{DRAFT}@r2")}),
        ("r3: four MLP layers more (24 MiB)",
         {"config.json": config, "model.safetensors": safetensors(_draft_tensors(True), f"{DRAFT}@r3")}),
    ]


def _other_targets_draft_commits() -> list[tuple[str, dict[str, bytes]]]:
    from lab.provision import _draft_config, _target_config

    config = {**_draft_config("dflash", _target_config(TARGET), None),
              wheels.DOUBLE_LAB.DRAFT_ACCEPTANCE_KEY: OTHER_TARGETS_ACCEPTANCE}
    return [("r1: the DFlash draft of lab/Qwen3-8B-Base (accepts little with lab/Qwen3-8B)",
             {"config.json": _json(config),
              "model.safetensors": safetensors(_draft_tensors(False), f"{OTHER_TARGETS_DRAFT}@r1")})]


def commits() -> dict[str, list[tuple[str, dict[str, bytes]]]]:
    """Each repository's commits, oldest first: (message, every file the commit's tree holds)."""
    return {TARGET: [("r1: Qwen3-8B, lab weights (small shards in the real format)", _target_files())],
            DRAFT: _draft_commits(), OTHER_TARGETS_DRAFT: _other_targets_draft_commits()}


def _git(git_dir: Path, *args: str, env: dict[str, str] | None = None, work_tree: Path | None = None) -> str:
    git_dir.mkdir(parents=True, exist_ok=True)
    command = ["git", f"--git-dir={git_dir}", *([f"--work-tree={work_tree}"] if work_tree else []), *args]
    quiet = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "LC_ALL": "C",
             "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.devnull}  # nobody's config, no hooks
    try:
        done = subprocess.run(command, capture_output=True, text=True, env={**quiet, **(env or {})}, timeout=120,
                              check=False)
    except FileNotFoundError:
        raise HfRepoError("git is not installed here: the lab's Hugging Face repositories are made with it") from None
    if done.returncode:
        raise HfRepoError(f"git {' '.join(args[:2])} in {git_dir} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def build_repo(git_dir: Path, repo: str, history: list[tuple[str, dict[str, bytes]]]) -> list[str]:
    """A bare repository at `git_dir`, branch main, one commit per entry of `history`; its shas, oldest first."""
    _git(git_dir, "init", "--quiet", "--bare", "--template=", "-b", "main")
    work = git_dir.with_name(git_dir.name + ".work")
    shas = []
    try:
        for i, (message, files) in enumerate(history):
            if work.exists():
                shutil.rmtree(work)
            work.mkdir(parents=True)
            for name, data in files.items():
                (work / name).write_bytes(data)
                (work / name).chmod(0o644)
            date = f"@{FIRST_DATE + i * DAY} +0000"
            env = {"GIT_AUTHOR_NAME": AUTHOR[0], "GIT_AUTHOR_EMAIL": AUTHOR[1], "GIT_AUTHOR_DATE": date,
                   "GIT_COMMITTER_NAME": AUTHOR[0], "GIT_COMMITTER_EMAIL": AUTHOR[1], "GIT_COMMITTER_DATE": date}
            _git(git_dir, "add", "--all", work_tree=work)
            _git(git_dir, "-c", "commit.gpgSign=false", "commit", "--quiet", "--no-verify", "-m", message,
                 env=env, work_tree=work)
            shas.append(_git(git_dir, "rev-parse", "HEAD"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        (git_dir / "index").unlink(missing_ok=True)  # a bare repository has none; `add` above made it
    return shas


def repo_dir(root: Path, repo: str) -> Path:
    """Where `repo` ("org/name") lives under a mirrors directory: olah's <mirrors-path>/models/<org>/<name>."""
    return root / "models" / repo


def build(dest: Path) -> dict[str, list[str]]:
    """Every repository of REPOS, bare, under dest/models/<org>/<name>; returns {repo: shas, oldest first}."""
    return {repo: build_repo(repo_dir(dest, repo), repo, history) for repo, history in commits().items()}


def cached() -> Path:
    """The built repositories in the controller's cache (made the first time; a build cut short never
    counts: it is made beside, and renamed into place once revisions.json is written)."""
    where = base.cache_dir() / CACHE_NAME
    if (where / "revisions.json").is_file():
        return where
    with base.flock(base.cache_dir() / f"{CACHE_NAME}.lock"):
        if (where / "revisions.json").is_file():
            return where
        part = where.with_name(where.name + ".build")
        shutil.rmtree(part, ignore_errors=True)
        part.mkdir(parents=True)
        revisions = build(part)
        (part / "revisions.json").write_text(json.dumps(revisions, indent=2) + "\n")
        shutil.rmtree(where, ignore_errors=True)
        part.rename(where)
    return where


def revisions() -> dict[str, list[str]]:
    """{repo: its commit shas, oldest first}, of the cached build (made the first time)."""
    return json.loads((cached() / "revisions.json").read_text())


def install(root: Path, mirrors_dir: str) -> dict[str, list[str]]:
    """A copy of the cached repositories into a host's root at `mirrors_dir`; returns their revisions."""
    src = cached()
    dest = root / mirrors_dir.lstrip("/")
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(src / "models", dest / "models")
    return revisions()


if __name__ == "__main__":
    if len(sys.argv) > 1:
        print(json.dumps(build(Path(sys.argv[1])), indent=2))
    else:
        print(cached(), json.dumps(revisions(), indent=2))
