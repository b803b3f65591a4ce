#!/usr/bin/env bash
# Build (or reuse) the REAL SGLang 0.5.23 virtualenv, CPU only, for the contract tests
# and for regenerating lab/doubles/sglang/flags.json. It never serves a model: it is
# there so that the real argument parser and the real start-up checks judge what
# fleet/rollout/render.py writes.
#
#   tools/sglang-venv.sh            # prints the venv's python path on stdout (last line)
#   tools/sglang-venv.sh --serve    # also the serving layer over it (below); prints ITS python
#
# Venv: ${SGLANG_FLEET_CACHE:-$HOME/.cache/sglang-fleet}/sglang-0.5.23
# Serving layer: ${SGLANG_FLEET_CACHE:-$HOME/.cache/sglang-fleet}/sglang-0.5.23-serve
# Idempotent: the venv is rebuilt only when the recipe below changed (a stamp file
# holds the recipe's hash) or the venv is broken. Progress goes to stderr.
#
# Recipe (why each part is there):
# - Everything is installed from a full lock with --no-deps: pip resolves nothing, so
#   nothing can pull a CUDA torch (sglang 0.5.23 itself requires torch==2.14.1 and a
#   CUDA stack; we install it --no-deps and take only what the parser needs).
# - torch==2.13.0+cpu: the CPU build this kind of machine keeps on local disk
#   (pip's find-links). The build fails if the torch it got has CUDA.
# - Minimal set for `import sglang`, `prepare_server_args` and
#   `python -m sglang.launch_server --help`: the brief's base set plus `triton`
#   (sglang.srt.utils.common imports it at module level; importing it needs no GPU).
# - For resolution (`ServerArgs.resolve_once()`, where speculative_hook.py's checks
#   run): transformers (sglang's pin 5.19.0), torchvision 0.28.0 (the CUDA wheel: its
#   C ops cannot load against CPU torch; the contract helper defines the two op
#   schemas its import needs, see tests/contract/sglang_parse_helper.py), dill,
#   apache-tvm-ffi, sentencepiece, compressed-tensors, gguf, openai,
#   partial-json-parser, einops, and their dependencies. sglang's own pins are kept
#   where it has one.
#
# Serving layer (--serve; the lab's real SGLang server on a CPU, ../shared/reference/sglang-cpu.md):
# a second, small venv beside the first, so that the parser venv stays exactly what the
# contract tests judge with. It is made from the system's /usr/bin/python3.11 (a lab host's
# own, Debian's: the lab binds both venvs read-only into a host, whose python this must be),
# holds only the 15 packages serving needs (SERVE_LOCK, installed the same locked --no-deps
# way; xgrammar pinned, pip would take 0.2.9; never torchaudio: its .so does not load against
# CPU torch and breaks start-up), a stand-in `sgl_kernel` (tools/sglang-serve/: every wheel of
# the real one is a CUDA build whose import fails) and a hook that adds the parser venv's
# site-packages (with its .pth files) behind its own, found relative to itself.
set -euo pipefail

VERSION=0.5.23
CACHE="${SGLANG_FLEET_CACHE:-$HOME/.cache/sglang-fleet}"
VENV="$CACHE/sglang-$VERSION"
PYTHON="${SGLANG_VENV_PYTHON:-python3.11}"
STAMP="$VENV/.sglang-fleet-recipe"

# Bump when the install steps below change (the lock and the shim are hashed anyway).
STEPS="v1: venv; pip install --no-deps --only-binary=:all: -r lock; torchvision shim; cuda check; import check"

# torchvision 0.28.0 on PyPI is the CUDA build: its C ops (_C.so) need libtorch_cuda
# and do not load against CPU torch, and then its module-level
# register_fake("torchvision::nms") raises "operator torchvision::nms does not exist",
# which breaks `import sglang` (sglang patches transformers, which imports torchvision).
# No CPU wheel is reachable from here, so this hook defines the two op SCHEMAS (no
# kernels) just before torchvision is first imported. Argument parsing and resolution
# never call a torchvision op; a call would fail loudly ("no kernel").
SHIM='"""sglang-fleet (tools/sglang-venv.sh): let the CUDA torchvision wheel import on CPU torch.

Defines the schemas of torchvision::nms and ::qnms (no kernels) right before torchvision
is first imported, so its _meta_registrations import does not fail. Only for the
parser/contract venv; nothing here runs a model.
"""
import sys

_LIBS = []


class _TorchvisionOpsSchemas:
    def find_spec(self, name, path=None, target=None):
        if name != "torchvision":
            return None
        sys.meta_path.remove(self)
        import torch

        lib = torch.library.Library("torchvision", "DEF")
        lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _LIBS.append(lib)  # a Library deregisters its ops when collected
        return None


sys.meta_path.insert(0, _TorchvisionOpsSchemas())
'

LOCK='aiohappyeyeballs==2.7.1
aiohttp==3.14.5
aiosignal==1.4.0
annotated-doc==0.0.7
annotated-types==0.8.0
anyio==4.16.0
apache-tvm-ffi==0.1.11
asttokens==3.0.2
attrs==26.1.0
certifi==2026.10.19.post1
charset-normalizer==3.5.3
click==8.5.1
compressed-tensors==0.18.0
dill==0.4.1
distro==1.9.0
einops==0.8.2
executing==2.3.0
filelock==4.3.1
frozenlist==1.8.0
fsspec==2026.9.0
gguf==0.19.0
h11==0.16.0
hf-xet==1.8.0
httpcore==1.0.9
httpcore2==2.16.2
httpx==0.28.1
httpx2==2.16.2
huggingface_hub==2.4.0
idna==3.20
ipython==9.18.1
ipython_pygments_lexers==1.1.1
jedi==0.20.1
Jinja2==3.1.6
jiter==0.19.0
loguru==0.7.3
markdown-it-py==4.3.0
MarkupSafe==3.0.4
matplotlib-inline==0.2.2
mdurl==0.1.2
mpmath==1.3.0
msgspec==0.23.0
multidict==7.2.1
networkx==3.6.1
numpy==2.4.6
openai==2.8.0
orjson==3.13.0
packaging==26.4
parso==0.8.7
partial-json-parser==0.2.1.1.post7
pexpect==4.9.0
pillow==13.0.0
prompt_toolkit==3.0.53
propcache==0.5.4
psutil==7.2.2
ptyprocess==0.7.0
pure_eval==0.2.4
pybase64==1.5.1
pydantic==2.14.4
pydantic_core==2.50.5
Pygments==2.21.0
PyYAML==6.0.4
pyzmq==27.3.0
regex==2026.11.19
requests==2.34.2
rich==15.0.0
safetensors==0.8.0
sentencepiece==0.2.1
setuptools==84.2.1
sglang==0.5.23
shellingham==1.5.4
sniffio==1.3.1
stack-data==0.6.3
starlette==1.10.0
sympy==1.14.0
tokenizers==0.23.2
torch==2.13.0+cpu
torchvision==0.28.0
tqdm==4.70.1
traitlets==5.16.1
transformers==5.19.0
triton==3.6.0
truststore==0.10.5
typer==0.29.2
typing-inspection==0.4.5
typing_extensions==4.16.0
urllib3==2.8.0
wcwidth==0.9.4
yarl==1.25.1'

SERVE_LOCK='cffi==2.1.1
fastapi==0.165.0
jsonschema==4.26.0
jsonschema-specifications==2025.9.1
opentelemetry-api==1.45.3
prometheus-client==0.26.0
pycparser==3.12
python-multipart==0.0.34
referencing==0.37.0
rpds-py==2026.9.1
setproctitle==1.3.8
soundfile==0.13.1
uvicorn==0.55.0
uvloop==0.23.0
xgrammar==0.2.7'
SERVE_PYTHON=/usr/bin/python3.11
SERVE_FILES="$(cd "$(dirname "$0")" && pwd)/sglang-serve"
SERVE_VENV="$VENV-serve"
SERVE_STAMP="$SERVE_VENV/.sglang-fleet-recipe"
SERVE=0
case "${1:-}" in
    --serve) SERVE=1 ;;
    "") ;;
    *) echo "usage: $0 [--serve]" >&2; exit 2 ;;
esac

log() { echo "sglang-venv: $*" >&2; }

command -v "$PYTHON" >/dev/null || { log "no $PYTHON on PATH (set SGLANG_VENV_PYTHON)"; exit 1; }
PYVER="$("$PYTHON" -c 'import sys; print(sys.version.split()[0])')"
case "$PYVER" in 3.11.*) ;; *) log "$PYTHON is $PYVER; the lock is for CPython 3.11"; exit 1 ;; esac

RECIPE_HASH="$(printf '%s\n%s\n%s\n%s\n' "$STEPS" "$PYVER" "$LOCK" "$SHIM" | sha256sum | cut -d' ' -f1)"

# The stamp is written only after a build passed its import check, so a matching stamp
# plus the files below is enough (importing sglang to check would cost ~8 s a call).
healthy() {
    [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$RECIPE_HASH" ] \
        && [ -x "$VENV/bin/python" ] \
        && "$VENV/bin/python" -c 'import sys' 2>/dev/null \
        && [ -n "$(ls -d "$VENV"/lib/python3.11/site-packages/sglang-$VERSION.dist-info 2>/dev/null)" ]
}

mkdir -p "$CACHE"
# One build at a time (a test session and a make target may both ask).
exec 9>"$CACHE/.sglang-$VERSION.lock"
flock 9

build_parser() {
log "building $VENV (recipe ${RECIPE_HASH:0:12})"
start=$(date +%s)
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
lockfile="$(mktemp)"
trap 'rm -f "$lockfile"' EXIT
printf '%s\n' "$LOCK" >"$lockfile"
# cd /: a checkout's own files must not shadow anything during the build.
piplog="$lockfile.log"
trap 'rm -f "$lockfile" "$piplog"' EXIT
# pip's "Location ... is ignored" lines (per-package index dirs this machine lacks) are noise.
if ! (cd / && "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
        --no-deps --only-binary=:all: -r "$lockfile") >"$piplog" 2>&1; then
    grep -v "is ignored: it is neither a file nor a directory" "$piplog" >&2 || true
    log "pip install failed"
    exit 1
fi
grep -v "is ignored: it is neither a file nor a directory" "$piplog" >&2 || true
site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
printf '%s' "$SHIM" >"$site/_sglang_fleet_torchvision_ops.py"
echo "import _sglang_fleet_torchvision_ops" >"$site/_sglang_fleet_torchvision_ops.pth"

cuda="$(cd / && "$VENV/bin/python" -c 'import torch; print(torch.version.cuda)')"
if [ "$cuda" != "None" ]; then
    log "torch in $VENV has CUDA $cuda: refusing (this venv must be CPU only)"
    exit 1
fi
(cd / && "$VENV/bin/python" -W ignore -c 'from sglang.srt.server_args import prepare_server_args; import sglang.srt.arg_groups.pipeline') >&2

echo "$RECIPE_HASH" >"$STAMP"
log "built in $(( $(date +%s) - start )) s"
}

healthy || build_parser
if [ "$SERVE" = 0 ]; then
    echo "$VENV/bin/python"
    exit 0
fi

# --- the serving layer ---------------------------------------------------------------------
SERVE_HASH="$( (printf '%s\n%s\n' "$RECIPE_HASH" "$SERVE_LOCK"; "$SERVE_PYTHON" -c 'import sys; print(sys.version)';
                cd "$SERVE_FILES" && find sgl_kernel -name '*.py' | LC_ALL=C sort | xargs sha256sum) | sha256sum | cut -d' ' -f1)"
serve_healthy() {
    [ -f "$SERVE_STAMP" ] && [ "$(cat "$SERVE_STAMP")" = "$SERVE_HASH" ] && [ -x "$SERVE_VENV/bin/python" ]
}
if ! serve_healthy; then
    log "building $SERVE_VENV (recipe ${SERVE_HASH:0:12})"
    start=$(date +%s)
    rm -rf "$SERVE_VENV"
    "$SERVE_PYTHON" -m venv --without-pip "$SERVE_VENV"
    serve_site="$SERVE_VENV/lib/python3.11/site-packages"
    serve_lock="$(mktemp)"
    printf '%s\n' "$SERVE_LOCK" >"$serve_lock"
    if ! (cd / && "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
            --only-binary=:all: --target "$serve_site" -r "$serve_lock") >"$serve_lock.log" 2>&1; then
        grep -v "is ignored: it is neither a file nor a directory" "$serve_lock.log" >&2 || true
        rm -f "$serve_lock" "$serve_lock.log"
        log "pip install of the serving layer failed"
        exit 1
    fi
    rm -f "$serve_lock" "$serve_lock.log"
    cp -r "$SERVE_FILES/sgl_kernel" "$serve_site/"
    # the parser venv's packages behind this one's, wherever both are (side by side, as in the cache)
    cat >"$serve_site/_sglang_fleet_serve.py" <<PY
"""sglang-fleet (tools/sglang-venv.sh --serve): the parser venv's site-packages, and its .pth files, behind ours."""
import os
import site

site.addsitedir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..",
                             "sglang-$VERSION", "lib", "python3.11", "site-packages"))
PY
    echo "import _sglang_fleet_serve" >"$serve_site/_sglang_fleet_serve.pth"
    if (cd / && "$SERVE_VENV/bin/python" -c 'import torchaudio' 2>/dev/null); then
        log "torchaudio is importable in $SERVE_VENV: refusing (it breaks the server's start-up on CPU torch)"
        exit 1
    fi
    (cd / && SGLANG_USE_CPU_ENGINE=1 "$SERVE_VENV/bin/python" -W ignore -c \
        'import sgl_kernel.scalar_type, sglang.srt.entrypoints.http_server') >&2
    echo "$SERVE_HASH" >"$SERVE_STAMP"
    log "serving layer built in $(( $(date +%s) - start )) s"
fi
echo "$SERVE_VENV/bin/python"
