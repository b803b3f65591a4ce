"""Models by Hugging Face repository and commit (HubModel) and the hub section (HubSpec): where
they are fetched from and kept."""

from __future__ import annotations

import re
from typing import Annotated

from packaging.utils import canonicalize_name
from pydantic import AfterValidator, Field, field_validator, model_validator

from fleet.core import layout
from fleet.spec.engine import _pinned, _requirement
from fleet.spec.names import http_url
from fleet.spec.secret import Source
from fleet.spec.text import AbsPath, CommandPath, Int, Kind, Number, Strict, Text

# --- weights: models by Hugging Face repository and commit (fetched by tasks/hub.py) ---------------

# huggingface_hub's rules for a repo id (validate_repo_id), with the organisation required: it is a
# directory of the revision's path
REPO_PART = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?\Z")
COMMIT = re.compile(r"[0-9a-f]{40}\Z")
BRANCH = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_./-]{0,254}\Z")


def _endpoint(v: str) -> str:
    return http_url(v, "a Hugging Face endpoint", "https://huggingface.co",
                    "the fetch's command line on every host (HF_ENDPOINT) and the deploy's log would show it; a "
                    "token goes in hub.token")


Endpoint = Annotated[Text, AfterValidator(_endpoint), Kind("endpoint URL")]


def _repo_id(v: str) -> str:
    parts = v.split("/")
    if len(parts) != 2 or not all(REPO_PART.match(p) for p in parts) or ".." in v or "--" in v or v.endswith(".git"):
        raise ValueError("a Hugging Face model repository as ORG/NAME (letters, digits, . _ -; each part starting and "
                         "ending with a letter or digit, at most 96 characters; no '..', '--' or final .git), e.g. "
                         "'z-lab/Qwen3.6-27B-DFlash'")
    return v


def _commit(v: str) -> str:
    if not COMMIT.match(v):
        raise ValueError("a commit: its 40 lowercase hexadecimal digits (a branch or tag moves: two hosts would "
                         "serve different weights; the repository's history page lists them)")
    return v


def _branch(v: str) -> str:
    if not BRANCH.match(v) or ".." in v or "//" in v or v.endswith(("/", ".lock")):
        raise ValueError("a branch name as git allows it (letters, digits, . _ / -; not starting with - or /, no "
                         "'..' or '//', not ending in / or .lock), e.g. 'main'")
    return v


class HubModel(Strict):
    """A model by its Hugging Face repository at one commit: fetched by the deploy (tasks/hub.py) from
    hub.endpoint into hub.models_dir/ORG/NAME/REVISION, checked, and served from there."""

    repo: Annotated[Text, AfterValidator(_repo_id)] = Field(description="The repository, ORG/NAME "
                                                            "(`z-lab/Qwen3.6-27B-DFlash`).")
    revision: Annotated[Text, AfterValidator(_commit)] | None = Field(
        None, description="The commit, its 40 hex digits. Required, unless `branch` is declared.")
    branch: Annotated[Text, AfterValidator(_branch)] | None = Field(
        None, description="Declared as a branch instead (`main`): resolved to its commit once per run, on the "
        "controller, so every host of the run gets the same commit, which the summary and the record then name. "
        "With `revision` too, that commit is served and the branch only named.")

    @model_validator(mode="after")
    def _a_commit_or_a_branch(self) -> HubModel:
        if self.revision is None and self.branch is None:
            raise ValueError("revision (a commit, its 40 hex digits) or, declared as such, branch (resolved to its "
                             "commit at each run)")
        return self

    def describe(self) -> str:
        if self.revision is None:
            return f"{self.repo}@{self.branch}"
        return f"{self.repo}@{self.revision[:12]}" + (f" (branch {self.branch})" if self.branch else "")


DRAFT_MODEL = ("Draft model by Hugging Face repository and commit (`{'repo': ..., 'revision': ...}`), fetched as "
               "service.model is; its revision directory is then draft_model_path.")


def _one_of(path: str | None, model: HubModel | None, path_name: str, model_name: str) -> None:
    if (path is None) == (model is None):
        raise ValueError(f"exactly one of {path_name} (a directory on the host, for weights placed by hand) and "
                         f"{model_name} (a Hugging Face repository and commit the deploy fetches)")


class HubSpec(Strict):
    """Where models declared by repository come from and where they go on the hosts (tasks/hub.py)."""

    endpoint: Endpoint = Field("https://huggingface.co", description="The Hugging Face endpoint the hosts fetch "
                               "from (HF_ENDPOINT): the public hub or an internal mirror (olah, a proxy); no "
                               "credentials in it.")
    token: Source | None = Field(None, description="Where the access token comes from (`{'env': 'HF_TOKEN'}`), for "
                                 "gated or private repositories: read when a deploy runs, uploaded to a 0600 file "
                                 "for the fetch only (HF_TOKEN_PATH), never on a command line.")
    models_dir: AbsPath = Field(layout.MODELS_DIR, description="Where the revisions go on the hosts: "
                                "MODELS_DIR/ORG/NAME/REVISION (a local disk: SGLang reads the weights from it at "
                                "every start).")
    client: Annotated[Text, AfterValidator(_pinned)] = Field(
        "huggingface_hub==2.4.0", description="The client that fetches, pinned: downloaded once into the "
        "controller's wheel cache and installed on each host beside the engines (hosts need no index).")
    python: CommandPath = Field("/usr/bin/python3", description="The host's Python the client runs with.")
    max_parallel: Int = Field(4, ge=1, le=1024, description="Hosts fetching from this endpoint at once in a run, "
                              "across all classes, 1..1024: a class of many hosts does not hammer the hub (its rate "
                              "limits) or a mirror's uplink.")
    disk_margin_mib: Int = Field(10240, ge=0, le=10_485_760, description="Free disk left at models_dir after a "
                                 "fetch, MiB: a host with less than the revision's size plus this is refused before "
                                 "the fetch, 0..10485760.")
    fetch_timeout_s: Number = Field(14400, ge=1, le=172_800, description="Longest one revision's fetch may take, "
                                    "1..172800 s (a 55 GB 27B model at 100 MB/s: about 10 minutes).")
    keep: Int = Field(1, ge=0, le=100, description="Revisions of a repository no unit uses (neither the live one nor "
                      "a kept backup's) kept, the newest; older ones are removed after a fetch, 0..100.")

    @field_validator("client")
    @classmethod
    def _is_the_hub_client(cls, v: str) -> str:
        if canonicalize_name(_requirement(v).name) != "huggingface-hub":
            raise ValueError("huggingface_hub==VERSION (the client the deploy runs on the hosts)")
        return v

    def revision_dir(self, model: HubModel) -> str:
        if model.revision is None:  # ClassSpec.with_commits first (fleet.weights.hub.pin_branches)
            raise ValueError(f"{model.repo}: branch {model.branch} is not resolved to a commit yet")
        return f"{self.models_dir}/{model.repo}/{model.revision}"
