"""Real, installable wheels of the SGLang double (lab/doubles/sglang/), one per build in BUILDS,
for the lab's package index (a mirror host, role = "mirror"): pip installs them from there as it
installs SGLang from PyPI, and each says which engine it is through its sglang/_build.json
(lab/doubles/sglang/_lab.py lays it over the host's lab entry).

Deterministic: the same sources give byte-identical wheels (fixed timestamps and modes, sorted
entries, the .dist-info last with RECORD at its end, as wheel builders write them).

    .venv/bin/python -m lab.wheels DEST     # build them all into DEST
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

DOUBLE = Path(__file__).resolve().parent / "doubles" / "sglang"
EPOCH = (1980, 1, 1, 0, 0, 0)  # zip's earliest date: a wheel's bytes must not depend on when it was built
SKIP = ("__pycache__",)  # and *.pyc: what an import left in the checkout is no part of the package


def _double_lab():
    # the double's own lab module (its package imports as `sglang`, not from here: load the one module)
    spec = importlib.util.spec_from_file_location("_sglang_double_lab", DOUBLE / "_lab.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


DOUBLE_LAB = _double_lab()  # its lists and checks, for the lab's own (labfile.py: a draft's declared acceptance)
BUILTIN_ALGORITHMS = list(DOUBLE_LAB.BUILTIN_ALGORITHMS)


@dataclass(frozen=True)
class Build:
    version: str  # the wheel's file name and .dist-info
    about: str
    algorithms: tuple[str, ...]
    load: str | None = None  # None: the host's lab entry decides (its `load` key)
    metadata_version: str | None = None  # what METADATA says, when that is not `version`

    @property
    def filename(self) -> str:
        return f"sglang-{self.version}-py3-none-any.whl"

    def build_json(self) -> dict:
        data = {"sglang_version": self.metadata_version or self.version, "sglang_algorithms": list(self.algorithms)}
        return data | ({"load": self.load} if self.load else {})


BUILDS = (
    Build("0.5.23", "SGLang 0.5.23: its builtin speculative algorithms, as the lab's preinstalled double",
          tuple(BUILTIN_ALGORITHMS)),
    Build("0.5.24.dev29907", "a DDTree build (upstream sglang PR 29907): the builtins and DDTREE, so its "
          "parser has --speculative-ddtree-budget", (*BUILTIN_ALGORITHMS, "DDTREE")),
    Build("0.5.24.dev2", "a nightly before DDTree (PR 29907): the builtins only, a dev build make check cannot judge, "
          "so preflight asks it what it offers", tuple(BUILTIN_ALGORITHMS)),
    Build("0.5.24.dev1", "the DDTree build's abilities, but its model load crashes (load = 'crash'): "
          "an engine that installs and passes its checks, then fails to serve", (*BUILTIN_ALGORITHMS, "DDTREE"),
          load="crash"),
    Build("0.5.25", "a broken wheel: its METADATA says Version 0.5.26, so pip refuses to install it",
          tuple(BUILTIN_ALGORITHMS), metadata_version="0.5.26"),
)
GOOD = tuple(b.version for b in BUILDS if b.metadata_version is None)  # the versions pip installs


def _sources() -> list[tuple[str, bytes]]:
    files = []
    for p in sorted(DOUBLE.rglob("*")):
        rel = p.relative_to(DOUBLE.parent)
        if p.is_file() and p.suffix != ".pyc" and not any(part in SKIP for part in rel.parts):
            files.append((rel.as_posix(), p.read_bytes()))
    return files


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _entry(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, EPOCH)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.create_system = 3  # unix, so that the mode below is read
    info.external_attr = 0o100644 << 16
    return info


def build_wheel(build: Build, dest: Path) -> Path:
    files = sorted(_sources() + [("sglang/_build.json", (json.dumps(build.build_json(), indent=1) + "\n").encode())])
    return _write(dest, build.filename, "sglang", build.version, build.metadata_version or build.version,
                  f"LAB DOUBLE of SGLang (not SGLang): {build.about}", files, REQUIRES)


REQUIRES = ("PyYAML",)  # as SGLang's own: the double reads --config files with it (lab/mirror.py serves it)

# A plugin that needs the DDTree build (as SGLang plugins pin the SGLang they extend): asked for beside
# sglang==0.5.23, pip finds no resolution.
PLUGIN = ("lab-ddtree-plugin", "1.0", "sglang==0.5.24.dev29907")


def build_plugin(dest: Path) -> Path:
    name, version, needs = PLUGIN
    module = name.replace("-", "_")
    return _write(dest, f"{module}-{version}-py3-none-any.whl", name, version, version,
                  "LAB: a plugin of the DDTree build", [(f"{module}/__init__.py", b"")], [needs])


def _write(dest: Path, filename: str, name: str, version: str, metadata_version: str, summary: str,
           files: list[tuple[str, bytes]], requires: tuple[str, ...] | list[str] = ()) -> Path:
    dist_info = f"{name.replace('-', '_')}-{version}.dist-info"
    metadata = (f"Metadata-Version: 2.1\nName: {name}\nVersion: {metadata_version}\nSummary: {summary}\n"
                "Requires-Python: >=3.10\n" + "".join(f"Requires-Dist: {r}\n" for r in requires))
    wheel = "Wheel-Version: 1.0\nGenerator: sglang-fleet lab/wheels.py\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files = files + [(f"{dist_info}/METADATA", metadata.encode()), (f"{dist_info}/WHEEL", wheel.encode())]
    record = "".join(_record_line(n, d) + "\n" for n, d in files) + f"{dist_info}/RECORD,,\n"
    files.append((f"{dist_info}/RECORD", record.encode()))
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / filename
    tmp = path.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w") as z:
        for name, data in files:
            z.writestr(_entry(name), data)
    tmp.rename(path)
    return path


def build_wheels(dest: Path) -> list[Path]:
    """Every build of BUILDS as a wheel in `dest`, then the plugin; returns their paths, in that order."""
    return [build_wheel(b, Path(dest)) for b in BUILDS] + [build_plugin(Path(dest))]


if __name__ == "__main__":
    for w in build_wheels(Path(sys.argv[1])):
        print(w)
