"""The engine section (EngineSpec): the SGLang a class runs, and the pinned requirements, index
URLs and wheel files it is declared with."""

from __future__ import annotations

import hashlib
import json
from pathlib import PurePosixPath
from typing import Annotated

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from pydantic import AfterValidator, Field, field_validator

from fleet.core import layout
from fleet.spec.names import http_url
from fleet.spec.text import CommandPath, Int, Kind, Number, Strict, Text

# --- engine: the SGLang a class runs, installed by the deploy --------------------------------

REQUIREMENTS_MAX = 64  # companions of one engine


def _requirement(v: str):
    try:
        r = Requirement(v)
    except InvalidRequirement as e:
        raise ValueError(f"a pip requirement (name[extras]==version): {e}") from None
    pins = list(r.specifier)
    if r.url or r.marker or len(pins) != 1 or pins[0].operator != "==" or "*" in pins[0].version:
        raise ValueError("a requirement pinned to one version, as name[extras]==version (no URL, marker, range "
                         "or wildcard): an engine is named by what it installs")
    return r


def _pinned(v: str) -> str:
    _requirement(v)
    return v


Pinned = Annotated[Text, AfterValidator(_pinned), Kind("pinned requirement")]


def _index_url(v: str) -> str:
    # Credentials in it would be in group_data (git), in pip's command line on every host (ps) and in the
    # deploy's log: a hosted index's token in the query (?token=) or fragment too. Only scheme and host are shown.
    return http_url(v, "a package index", "https://pypi.org/simple",
                    "pip's command line on every host and the deploy's log would show it; credentials go in the "
                    "host's netrc")


IndexUrl = Annotated[Text, AfterValidator(_index_url), Kind("index URL")]


def _wheel_file(v: str) -> str:
    try:
        parse_wheel_filename(PurePosixPath(v).name)
    except InvalidWheelFilename as e:
        raise ValueError(f"a wheel file's path (NAME-VERSION[-BUILD]-PYTHON-ABI-PLATFORM.whl): {e}") from None
    return v


WheelFile = Annotated[Text, AfterValidator(_wheel_file), Kind("wheel file")]
WHEELS_MAX = 1024  # wheel files of one engine (a whole wheelhouse: torch and its CUDA libraries are ~30)


class EngineSpec(Strict):
    """The SGLang a class runs, installed by the deploy (tasks/engine.py): each distinct engine in its
    own venv (fleet/core/layout.py), named by what it installs, built beside the live one before anything
    stops and kept for a rollback."""

    sglang: Pinned = Field(description="SGLang as pip's requirement, pinned: `sglang==0.5.23`, extras allowed "
                           "(`sglang[all]==0.5.23`); a build of your own by its version (`sglang==0.5.24.dev29907`).")
    packages: list[Pinned] = Field(
        default_factory=list, max_length=REQUIREMENTS_MAX,
        description="Pinned companions installed with it (`flashinfer-python==0.5.3`, `torch==2.9.1`), each "
        f"`name==version`, at most {REQUIREMENTS_MAX}.")
    index_url: IndexUrl | None = Field("https://pypi.org/simple",
                                       description="Package index the hosts install from (pip --index-url): PyPI or "
                                       "an internal mirror; no credentials in it. None: no index (pip --no-index), "
                                       "everything from `wheels`, for hosts that reach none.")
    extra_index_urls: list[IndexUrl] = Field(default_factory=list, max_length=8,
                                             description="More indexes (pip --extra-index-url), e.g. PyTorch's "
                                             "for CUDA wheels; at most 8.")
    wheels: list[WheelFile] = Field(
        default_factory=list, max_length=WHEELS_MAX,
        description="Wheel files on the controller (relative to where the deploy runs, or absolute), uploaded to "
        "each host that installs this engine and offered to pip beside the index (pip --find-links): a build of "
        "your own (sglang PR 29907's DDTree), or a whole wheelhouse (group_data is Python: "
        "`sorted(str(p) for p in Path('wheelhouse').glob('*.whl'))`). A wheel is known by its file name: a rebuild "
        f"takes a new version or build tag (NAME-VERSION-BUILD-...), at most {WHEELS_MAX}.")
    python: CommandPath = Field("/usr/bin/python3", description="The host's Python the venv is made from.")
    disk_mib: Int = Field(20480, ge=0, le=10_485_760,
                          description=f"Free disk the install needs at {layout.ENGINES_DIR}, MiB: a CUDA SGLang "
                          "0.5.23 venv is ~10.5 GB on disk (207 wheels, 4.35 GB to download: torch, its CUDA "
                          "libraries, sglang-kernel, triton, flashinfer; pip keeps no cache here); the host is "
                          "refused before the install with less, 0..10485760.")
    install_timeout_s: Number = Field(1800, ge=1, le=86_400, description="Longest the install may take (a pip "
                                      "download of several GiB), 1..86400.")
    keep: Int = Field(2, ge=0, le=100, description="Engines no unit uses (neither the live one nor a kept "
                      "backup's) kept, the newest; older ones are removed when an engine is installed, 0..100.")

    @field_validator("sglang")
    @classmethod
    def _is_sglang(cls, v: str) -> str:
        if canonicalize_name(_requirement(v).name) != "sglang":
            raise ValueError("SGLang's requirement: sglang==VERSION (companions go in engine.packages)")
        return v

    @field_validator("packages")
    @classmethod
    def _companions(cls, packages: list[str]) -> list[str]:
        names = [canonicalize_name(_requirement(p).name) for p in packages]
        if "sglang" in names:
            raise ValueError("no sglang here: engine.sglang names it")
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"each package once; found {', '.join(twice)} more than once")
        return packages

    @property
    def version(self) -> str:
        """SGLang's pinned version."""
        return next(iter(_requirement(self.sglang).specifier)).version

    @property
    def name(self) -> str:
        """The venv's directory name: SGLang's version and a hash of everything that decides what is
        installed (the same declaration on every host gets the same name; another gets another)."""
        what = self.model_dump(include={"sglang", "packages", "index_url", "extra_index_urls", "python"})
        if self.wheels:
            what["wheels"] = sorted(PurePosixPath(w).name for w in self.wheels)
        return f"sglang-{self.version}-{hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:12]}"

    @property
    def requirements(self) -> list[str]:
        return [self.sglang, *self.packages]
