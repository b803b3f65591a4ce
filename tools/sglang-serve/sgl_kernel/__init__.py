"""sglang-fleet's stand-in for `sgl_kernel` (SGLang's CUDA kernel package), for serving SGLang 0.5.23 on a CPU.

Every wheel of the real package is a CUDA build whose import fails on a machine without CUDA
(libnvrtc). SGLang imports many of its names at module level but, on the torch-native CPU path
(`--device cpu --attention-backend torch_native`), calls none of them. So here any attribute and any
submodule exists on demand, each attribute a function that raises if it is ever called: a call is a
path this stand-in cannot serve, and it says so instead of computing something wrong.

No `torch.ops.sgl_kernel` op is registered: SGLang's `cpu_has_amx_support()` then stays False and
every layer takes its plain-torch path. The one real module is `scalar_type.py` (pure Python, the
quantization types' descriptions that quantization/utils.py reads at import).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0.0+sglang-fleet-standin"


def _missing(qualname: str):
    def kernel(*args, **kwargs):
        raise RuntimeError(f"{qualname} is a stand-in (tools/sglang-serve/sgl_kernel): the CUDA kernel package is "
                           "not installed on this CPU host, and this path needs it")

    kernel.__name__ = kernel.__qualname__ = qualname.rsplit(".", 1)[-1]
    return kernel


def _on_demand(module: types.ModuleType) -> None:
    def __getattr__(name: str):
        if name.startswith("__"):  # dunder probes (__path__, __file__...) are absent, as in a plain module
            raise AttributeError(name)
        value = _missing(f"{module.__name__}.{name}")
        setattr(module, name, value)
        return value

    module.__getattr__ = __getattr__


class _Submodules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Any `sgl_kernel.X[.Y]` that has no file here is an empty package whose attributes come on demand."""

    def find_spec(self, fullname, path=None, target=None):
        # appended to sys.meta_path: asked only once the path finders found no file of that name
        if not fullname.startswith(__name__ + "."):
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__path__ = []
        _on_demand(module)


_on_demand(sys.modules[__name__])
sys.meta_path.append(_Submodules())
