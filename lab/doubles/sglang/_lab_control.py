"""LAB DOUBLE only (no such module in SGLang): set the SGLang double's control file (sglang/_lab.py).

    python3 -m sglang._lab_control [--acceptance ALPHA|none] [--metrics on|off] [--generation serve|hang] [--reset]

A module of its own, not `-m sglang._lab`: that one is imported with the package already, and
runpy would warn. Run with -m (and no --help), `import sglang` counts as a server start: no
engine_import_seconds, no line in the import log (sglang/__init__.py).
"""

import sys

from sglang._lab import control_main

if __name__ == "__main__":
    sys.exit(control_main(sys.argv[1:]))
