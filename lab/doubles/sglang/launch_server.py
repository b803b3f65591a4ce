"""LAB DOUBLE of `python -m sglang.launch_server` (not SGLang): see sglang/__init__.py.

Same entry point and order as the real one: parse (exit 2 on a bad flag), resolve the
arguments (a failed check raises here: traceback on stderr, exit 1, nothing loaded),
then load and serve (sglang/srt/entrypoints/http_server.py).
"""

import sys
import warnings

from sglang.srt.server_args import prepare_server_args


def run_server(server_args):
    server_args.resolve_once()
    from sglang.srt.entrypoints.http_server import launch_server

    launch_server(server_args)


if __name__ == "__main__":
    warnings.warn(
        "'python -m sglang.launch_server' is still supported, but "
        "'sglang serve' is the recommended entrypoint.\n"
        "  Example: sglang serve --model-path <model> [options]",
        UserWarning,
        stacklevel=1,
    )

    server_args = prepare_server_args(sys.argv[1:])

    run_server(server_args)
