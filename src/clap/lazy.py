"""Heavy libraries imported when first used, so every import can sit at the top of its module.

    python -c "import sys, clap.cli; print('torch' in sys.modules)"    # False: `clap --help` pays no torch

torch costs a command about 7 s on 2 cores, transformers and TRL more, FastAPI 0.4 s; most commands never touch
them. A module that calls into one binds it at its top with `torch = lazy.module("torch")`: the name is a stand-in
whose first attribute access (`torch.tensor`) imports the real module, and every later one reads from it. A clap
module whose classes *extend* a heavy library's class (`GrowingCache(DynamicCache)`, the TRL trainers) imports it at
its own top, and a module that uses it binds it the same way: `kv_cache = lazy.module("clap.evaluate.kv_cache")`.
`clap.codedeps` reads these bindings as imports, so the import graph, the floors and each stage's code dependencies
see them; `tests/test_architecture.py` checks that a clap module is bound so only when importing it would pull one
of the heavy libraries.

Decorators are evaluated when their module is imported, so `@torch.inference_mode()` would import torch then:
`@inference_mode` and `@no_grad` below enter torch's context at each call instead.
"""

from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any


class _Deferred(ModuleType):
    """A module's stand-in: its first missing attribute imports the module, which answers from then on."""

    def __getattr__(self, attr: str) -> Any:
        real = importlib.import_module(self.__name__)
        self.__dict__.update(vars(real))  # later reads are plain lookups (decoding reads `torch.*` every step)
        return getattr(real, attr)

    def __repr__(self) -> str:
        return f"<module {self.__name__!r}, imported when first used>"


def module(name: str) -> ModuleType:
    """`name` (a dotted module path), imported at its first attribute access; the module itself if already loaded."""
    return sys.modules.get(name) or _Deferred(name)


def _under(context: str) -> Callable[[Callable], Callable]:
    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            import torch

            with getattr(torch, context)():
                return fn(*args, **kwargs)
        return run
    return decorate


inference_mode = _under("inference_mode")  # `@inference_mode`: `@torch.inference_mode()` with torch imported at the call
no_grad = _under("no_grad")  # `@no_grad`: `@torch.no_grad()` with torch imported at the call
