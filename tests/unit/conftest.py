"""The unit tests run in one gevent-patched process, patched before any test module is imported.

pyinfra's CLI package (which ops/fleet.py imports for its inventory loader) patches the standard library with
gevent's on import. Collected in the middle of the suite, that would leave the modules collected before it
with the unpatched threading.Thread, whose join() then misses a thread's end and waits out its whole timeout
(tests/unit/test_doubles.py's streams: minutes). Patched first, every module sees one library."""

from gevent import monkey

monkey.patch_all()
