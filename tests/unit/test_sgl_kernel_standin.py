"""tools/sglang-serve/sgl_kernel: the stand-in for SGLang's CUDA kernel package that the lab's real server imports
on a CPU (tools/sglang-venv.sh --serve). Any name exists, and raises if called; any submodule exists; no torch op
is registered (it imports no torch); its scalar types are what SGLang's quantization code reads at import. Each
check in a process of its own: the package adds a finder to sys.meta_path."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

STANDIN = Path(__file__).resolve().parents[2] / "tools" / "sglang-serve"


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=STANDIN, capture_output=True, text=True, timeout=60)


def test_any_name_and_submodule_exist_and_raise_when_called():
    p = run("import sys, sgl_kernel\n"
            "from sgl_kernel import fused_add_rmsnorm\n"
            "from sgl_kernel.flash_attn.cute import flash_attn_varlen_func as f\n"
            "assert sgl_kernel.fused_add_rmsnorm is fused_add_rmsnorm and 'torch' not in sys.modules\n"
            "assert not hasattr(sgl_kernel, '__wrapped__')\n"
            "f(1, x=2)\n")
    assert p.returncode == 1 and p.stderr.strip().splitlines()[-1] == (
        "RuntimeError: sgl_kernel.flash_attn.cute.flash_attn_varlen_func is a stand-in (tools/sglang-serve/sgl_kernel): "
        "the CUDA kernel package is not installed on this CPU host, and this path needs it"), p.stderr


@pytest.mark.parametrize("name, bits, text", [("uint4b8", 4, "uint4b8"), ("uint8b128", 8, "uint8b128"),
                                              ("uint4", 4, "uint4"), ("uint8", 8, "uint8"), ("int8", 8, "int8"),
                                              ("float4_e2m1f", 4, "float4_e2m1f"),
                                              ("float8_e4m3fn", 8, "float8_e4m3fn"), ("bfloat16", 16, "float16_e8m7")])
def test_the_scalar_types_quantization_reads(name, bits, text):
    p = run("from sgl_kernel.scalar_type import ScalarType, scalar_types as t\n"
            f"s = t.{name}\n"
            "ids = {v.id for k, v in vars(t).items() if isinstance(v, ScalarType)}\n"
            "print(s.size_bits, s, len(ids) == len({str(v) for v in vars(t).values() if isinstance(v, ScalarType)}))")
    assert p.returncode == 0 and p.stdout.split() == [str(bits), text, "True"], p.stderr
