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
