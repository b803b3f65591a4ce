"""LAB DOUBLE of SGLang. This is NOT SGLang and serves no model.

A stdlib-only stand-in installed in lab hosts at /usr/local/lib/sglang-double/sglang/ and
run as `LAUNCHER -m sglang.launch_server ARGS`, where LAUNCHER (e.g. /opt/sglang/bin/python)
is a sh wrapper that puts /usr/local/lib/sglang-double on PYTHONPATH and execs
/usr/bin/python3. It behaves, from the outside, like SGLang 0.5.23's server: the same
flags (generated from the real parser into flags.json), the same start-up checks, the
same start-up sequence (port closed while loading, /health 503 during warm-up), the same
HTTP surface for what a deploy uses, the same processes (one scheduler child per GPU,
holding its memory as seen by the lab's nvidia-smi double) and the same stop behaviour
(SIGTERM drains; a dead scheduler takes the whole tree down). Tokens come at host.json's
decode_tokens_per_s, or, where host.json has `speculation`, as its speed model says (block size
and running requests: lab/doubles/README.md). See docs/ARCHITECTURE.md, "Lab host contract".

The host's lab entry (/etc/lab/host.json, or $LAB_HOST_JSON) decides the version, the
speculative algorithms this "engine" has, whether loading succeeds, crashes or hangs, and
how long `import sglang` takes outside a server start (engine_import_seconds: the cost an
engine check pays on a real host; each such import is counted in $LAB_SGLANG_IMPORT_LOG,
else /run/lab-sglang-imports.log).

Built as a wheel (lab/wheels.py, served by the lab's package index) the package also holds
sglang/_build.json: that build's sglang_version, sglang_algorithms and load, laid over the
host's, so what pip installed says which engine it is (the version below, the
--speculative-algorithm choices, --speculative-ddtree-budget with DDTREE, a load that crashes).
"""

import sys
import time

from sglang._lab import host_config, note_import

__version__ = str(host_config().get("sglang_version") or "0.5.23")


def _starting_a_server() -> bool:
    # `python -m sglang.launch_server ARGS` without --help (argv[0] is still "-m" while the package
    # imports): its start-up time is load_seconds. `python -c ...` is an engine check.
    return sys.argv[0] != "-c" and "--help" not in sys.argv and "-h" not in sys.argv


if not _starting_a_server():
    # What a real import costs (torch, CUDA libraries): host.json's engine_import_seconds.
    time.sleep(float(host_config().get("engine_import_seconds") or 0))
    note_import()
