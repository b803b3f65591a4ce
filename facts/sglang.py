"""The SGLang engine at the declared launcher: version, speculative algorithms, flags.

Reading them imports SGLang (torch: seconds on a real host), so the answer is cached on the
host, keyed by what identifies the installed engine: the installed distributions (SGLang's
version and any plugin's) and SGLang's installed-files record (RECORD), plus the environment
the unit gives it. A no-op run reads the cache and imports nothing; an upgrade, a plugin or
another environment misses it. Without a RECORD (an editable install) nothing is cached.
"""

from __future__ import annotations

import hashlib
import json
import shlex

from pyinfra.api import FactBase

from facts import captured, quiet
from fleet.engine.parse import Engine, parse_engine
from fleet.core.wire import MARK, block, mark

KEEP = 10  # cache files kept (one per engine and environment seen)
# --help is the engine's own list of algorithms and flags: of its 190 kB only the option lines and
# the speculative algorithm's help are read (fleet.engine.parse), so only they are kept and sent, on every
# run of every host (the cache hit sends them too).
OPTIONS = "awk '/^  -/ { keep = /^  --speculative-algorithm/; print; next } keep'"
FORMAT = 3  # of a cache file (its answer's framing): another format is another file, never misread
# Which engine is installed, without importing it: distributions and SGLang's RECORD.
_KEY = (
    "import hashlib, importlib.metadata as m; d = m.distribution('sglang'); h = hashlib.sha1(); "
    "[h.update(x.encode()) for x in sorted(f\"{e.metadata['Name']}=={e.version}\" for e in m.distributions())]; "
    "h.update((d.read_text('RECORD') or '').encode()); print(h.hexdigest())"
)


class SglangEngine(FactBase[Engine]):
    def command(self, launcher: str, timeout_s: float, environment: dict[str, str], cache_dir: str) -> str:
        """environment: the unit's (it decides what the engine loads, e.g. LD_LIBRARY_PATH);
        cache_dir: fleet.core.layout.ENGINE_CACHE_DIR on a host."""
        run = f"env {' '.join(shlex.quote(f'{k}={v}') for k, v in environment.items())} {shlex.quote(launcher)}"
        tag = hashlib.sha1(json.dumps([FORMAT, launcher, environment], sort_keys=True).encode()).hexdigest()[:12]
        cache = shlex.quote(cache_dir)
        check = "; ".join([
            captured("version", run + " -c " + shlex.quote("import sglang; print(sglang.__version__)"), timeout_s),
            captured("help", run + " -m sglang.launch_server --help", timeout_s, keep=OPTIONS),
        ])
        hit = block("engine-cache", 'cat "$f"', "hit")
        keep = f"ls -1t {cache}/*.engine 2>/dev/null | tail -n +{KEEP + 1} | xargs -r rm -f"
        # the key names a file: hexadecimal or nothing; a hit's cached answer is sent as one
        # record (the file is the host's: it must not frame what follows it)
        return quiet(
            f"if [ -x {shlex.quote(launcher)} ]; then "
            f"key=$({run} -c {shlex.quote(_KEY)} 2>/dev/null); case \"$key\" in *[!0-9a-f]*) key=;; esac; "
            f"f={cache}/\"$key\"-{tag}.engine; "
            f"if [ -n \"$key\" ] && [ -s \"$f\" ]; then {hit}; "
            f"else res=$({check}); printf '%s\\n' \"$res\"; "
            f"if [ -n \"$key\" ] && printf '%s\\n' \"$res\" | grep -qx '{MARK}version=0' "
            f"&& printf '%s\\n' \"$res\" | grep -qx '{MARK}help=0'; then "
            f"mkdir -p -m 700 {cache} && printf '%s\\n' \"$res\" > \"$f.tmp\" && mv -f \"$f.tmp\" \"$f\"; {keep}; fi; fi; "
            f"else {mark('launcher', 'missing')}; fi"
        )

    def process(self, output: list[str]) -> Engine:
        return parse_engine(output)
