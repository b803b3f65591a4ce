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
decode_tokens_per_s. See docs/ARCHITECTURE.md, "Lab host contract".

The host's lab entry (/etc/lab/host.json, or $LAB_HOST_JSON) decides the version, the
speculative algorithms this "engine" has, and whether loading succeeds, crashes or hangs.
"""

from sglang._lab import host_config

__version__ = str(host_config().get("sglang_version") or "0.5.23")
