"""The lab's package index and Hugging Face mirror: a mirror host (role = "mirror") runs a real pypiserver,
from PyPI, that serves the SGLang double's wheels (lab/wheels.py) on INDEX_PORT, as a fleet's own index
would, and a real olah (a Hugging Face mirror, from PyPI) in its local-mirror mode on HF_PORT, serving the
lab's model repositories (lab/hf.py) from HF_MIRRORS_DIR, offline (it never asks huggingface.co).

Lab hosts reach no registry, so nothing is fetched from inside one: the controller downloads
pypiserver's wheels once into its cache (tasks.common.downloaded: ${SGLANG_FLEET_CACHE:-~/.cache/
sglang-fleet}/wheels/pypiserver-<version>-py<X.Y>/, one per Python of the Debian releases the lab
builds), and installs them into the host's root with its own pip: they are pure-Python wheels,
installed for the host's Python (--python-version).

Access log: the journal of lab-pypi.service (`journalctl -u lab-pypi.service -o cat`): one line a
request in Common Log Format, `CLIENT - - [DATE] "GET /simple/sglang/ HTTP/1.1" 200 SIZE`; with -v
pypiserver also logs each request's URL and status on two lines of their own.

olah: installed the same way (its wheels for the host's Python and this machine's architecture: it has
binary dependencies, pydantic-core, brotli, markupsafe, psutil, pyyaml), run by lab-olah.service with
OLAH_CONFIG (offline, mirrors-path HF_MIRRORS_DIR, its cache in OLAH_STATE_DIR/repos). It reads the
repositories with GitPython, which runs git (in the base image). Its access log is that unit's journal:
`journalctl -u lab-olah.service -o cat`, uvicorn's lines behind olah's own prefix (../shared/reference/hf-mirror.md).
"""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys
from pathlib import Path

from lab import base
from tasks.common import downloaded

PYPISERVER_VERSION = "2.4.2"  # needs Python >= 3.10: bookworm's 3.11, trixie's 3.13 (with legacy-cgi)
INDEX_PORT = 8080
INDEX_DIR = "/srv/pypi"
PYPISERVER_DIR = "/opt/pypiserver"
UNIT = "lab-pypi.service"

UNIT_TEXT = f"""[Unit]
Description=lab: the lab's package index (pypiserver {PYPISERVER_VERSION}), serving {INDEX_DIR}
After=network.target

[Service]
Environment=PYTHONPATH={PYPISERVER_DIR}
# -v: each request's access line in the journal; --disable-fallback: a package the index lacks is a 404,
# not a redirect to PyPI, which no lab host reaches
ExecStart=/usr/bin/python3 -m pypiserver run --interface 0.0.0.0 --port {INDEX_PORT} --disable-fallback -v {INDEX_DIR}
Restart=on-failure

[Install]
WantedBy=multi-user.target
"""


OLAH_VERSION = "0.5.4"  # needs Python >= 3.10
HF_PORT = 8090
HF_MIRRORS_DIR = "/srv/hf-mirrors"  # olah's mirrors-path: git repositories at models/<org>/<name>
OLAH_DIR = "/opt/olah"
OLAH_STATE_DIR = "/var/lib/olah"  # its cache (repos-path; a local mirror puts nothing there) and its log file
OLAH_CONFIG = "/etc/olah/olah.toml"
HF_UNIT = "lab-olah.service"

HF_UNIT_TEXT = f"""[Unit]
Description=lab: the lab's Hugging Face mirror (olah {OLAH_VERSION}), serving the git repositories in {HF_MIRRORS_DIR}
After=network.target

[Service]
Environment=PYTHONPATH={OLAH_DIR}
# each access line in the journal as it is written (olah prints uvicorn's through its own logger)
Environment=PYTHONUNBUFFERED=1
WorkingDirectory={OLAH_STATE_DIR}
ExecStart=/usr/bin/python3 -m olah.server --config {OLAH_CONFIG} --log-path {OLAH_STATE_DIR}/logs
Restart=on-failure

[Install]
WantedBy=multi-user.target
"""


def olah_config(ip: str) -> str:
    """olah's TOML for a mirror host at `ip`: every address, HF_PORT, local repositories only, offline."""
    return f"""# lab: olah {OLAH_VERSION} in local-mirror mode (lab/mirror.py)
[basic]
host = "0.0.0.0"
port = {HF_PORT}
mirror-netloc = "{ip}:{HF_PORT}"
mirror-lfs-netloc = "{ip}:{HF_PORT}"
repos-path = "{OLAH_STATE_DIR}/repos"
mirrors-path = ["{HF_MIRRORS_DIR}"]

[accessibility]
offline = true
"""


class MirrorError(RuntimeError):
    pass


def _pip(*args: str, what: str = f"pypiserver {PYPISERVER_VERSION}") -> None:  # its install (downloads: tasks.common)
    command = [sys.executable, "-m", "pip", *args, "--quiet", "--disable-pip-version-check"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        raise MirrorError(f"pip {args[0]} of {what} took more than 600 s") from None
    if done.returncode:
        raise MirrorError(f"pip {args[0]} of {what} failed: "
                          + (done.stderr.strip().splitlines() or ["pip said nothing"])[-1])


def _requirements(python: str) -> list[str]:
    """pypiserver and what its markers ask for on `python`, named: pip's --python-version picks wheels
    for that Python but evaluates markers with the controller's own."""
    version = tuple(int(x) for x in python.split("."))
    return [f"pypiserver=={PYPISERVER_VERSION}",
            *(["importlib-resources>=6.5.2"] if version < (3, 12) else []),
            *(["legacy-cgi>=2.6.4"] if version >= (3, 13) else [])]  # cgi left the standard library in 3.13


def _pythons() -> list[str]:
    return sorted({image.python for image in base.IMAGES.values()})


def cached_pypiserver(python: str) -> list[Path]:
    """pypiserver's wheels and its dependencies' for `python` (X.Y), in the controller's cache."""
    return downloaded(base.cache_dir() / "wheels" / f"pypiserver-{PYPISERVER_VERSION}-py{python}",
                      ["--only-binary=:all:", "--python-version", python, *_requirements(python)],
                      f"pypiserver {PYPISERVER_VERSION} for Python {python}")


# What the SGLang double's wheels require, as SGLang's do (it reads --config files with PyYAML): the
# index serves it too, so an engine's venv resolves its dependencies from the index, as a real one does.
DEPENDENCIES = ("pyyaml==6.0.2",)


def cached_dependencies() -> list[Path]:
    """DEPENDENCIES' wheels for every lab Python on this machine's architecture, in the controller's cache."""
    machine = platform.machine()
    return [w for python in _pythons() for w in downloaded(
        base.cache_dir() / "wheels" / f"index-{'-'.join(d.replace('==', '-') for d in DEPENDENCIES)}-py{python}-{machine}",
        ["--only-binary=:all:", "--python-version", python, "--implementation", "cp",
         "--platform", f"manylinux2014_{machine}", *DEPENDENCIES], f"{', '.join(DEPENDENCIES)} for Python {python}")]


def _binary(python: str) -> list[str]:
    """pip's options for wheels that run on a lab host of `python` (X.Y) on this machine's architecture."""
    machine = platform.machine()
    return ["--only-binary=:all:", "--python-version", python, "--implementation", "cp",
            *(a for tag in ("manylinux_2_28", "manylinux2014") for a in ("--platform", f"{tag}_{machine}"))]


def cached_olah(python: str) -> list[Path]:
    """olah's wheels and its dependencies' for `python` (X.Y) on this machine's architecture, in the
    controller's cache. Its requirements carry no marker that differs between the lab's Pythons."""
    return downloaded(base.cache_dir() / "wheels" / f"olah-{OLAH_VERSION}-py{python}-{platform.machine()}",
                      [*_binary(python), f"olah=={OLAH_VERSION}"], f"olah {OLAH_VERSION} for Python {python}")


def download() -> None:
    """Everything a mirror host gets from the controller's cache, downloaded the first time."""
    for python in _pythons():
        cached_pypiserver(python)
        cached_olah(python)
    cached_dependencies()


def install_pypiserver(root: Path, python: str) -> None:
    """pypiserver into the host's root at PYPISERVER_DIR, for its `python` (X.Y), from the cache only."""
    target = root / PYPISERVER_DIR.lstrip("/")
    # --no-compile: the host's own Python compiles what it imports (the controller's .pyc would be for its version)
    wheels = cached_pypiserver(python)[0].parent
    _pip("install", "--no-index", "--find-links", str(wheels), "--only-binary=:all:", "--no-compile",
         "--python-version", python, "--target", str(target), "--root-user-action=ignore", *_requirements(python))
    # its console scripts name the controller's interpreter; the unit runs `python3 -m pypiserver`
    shutil.rmtree(target / "bin", ignore_errors=True)


def install_olah(root: Path, python: str) -> None:
    """olah into the host's root at OLAH_DIR, for its `python` (X.Y), from the cache only."""
    target = root / OLAH_DIR.lstrip("/")
    wheels = cached_olah(python)[0].parent
    _pip("install", "--no-index", "--find-links", str(wheels), "--no-compile", *_binary(python), "--target", str(target),
         "--root-user-action=ignore", f"olah=={OLAH_VERSION}", what=f"olah {OLAH_VERSION}")
    shutil.rmtree(target / "bin", ignore_errors=True)  # console scripts naming the controller's interpreter
