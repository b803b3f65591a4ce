"""The unit tests run in one gevent-patched process, patched before any test module is imported.

pyinfra's CLI package (which ops/fleet.py imports for its inventory loader) patches the standard library with
gevent's on import. Collected in the middle of the suite, that would leave the modules collected before it
with the unpatched threading.Thread, whose join() then misses a thread's end and waits out its whole timeout
(tests/unit/test_doubles.py's streams: minutes). Patched first, every module sees one library."""

from gevent import monkey

monkey.patch_all()


import subprocess  # noqa: E402 - after the patch, as everything else
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tools() -> Path:
    """promtool and amtool from Debian's packages (tools/debs.sh downloads them once into the cache)."""
    out = subprocess.run(["bash", str(Path(__file__).resolve().parents[2] / "tools/debs.sh")], capture_output=True,
                         text=True, timeout=900)
    assert out.returncode == 0, out.stderr
    return Path(out.stdout.strip().splitlines()[-1]) / "bin"


@pytest.fixture(scope="session")
def keepalived(tools, tmp_path_factory) -> list[str]:
    """The command that runs Debian's keepalived here: taken out of its package in the same cache with the libraries
    it links that this machine lacks (their packages there too), not installed (that would start it)."""
    debs, root = tools.parent, tmp_path_factory.mktemp("keepalived")
    todo, seen = ["keepalived"], set()
    while todo:
        name = todo.pop()
        found = sorted(debs.glob(f"{name}_*.deb"))
        installed = subprocess.run(["dpkg-query", "-W", "-f=${Status}", name], capture_output=True, text=True)
        if name in seen or not found or (name != "keepalived" and installed.stdout.endswith(" installed")):
            continue
        seen.add(name)
        subprocess.run(["dpkg-deb", "-x", str(found[-1]), str(root)], check=True)
        depends = subprocess.run(["dpkg-deb", "-f", str(found[-1]), "Depends"], capture_output=True, text=True,
                                 check=True).stdout
        todo += [d.split()[0] for d in depends.replace("|", ",").split(",") if d.strip().startswith("lib")]
    libraries = ":".join(str(d) for d in (root / "usr/lib/x86_64-linux-gnu", root / "lib/x86_64-linux-gnu"))
    return ["env", f"LD_LIBRARY_PATH={libraries}", str(root / "usr/sbin/keepalived")]
