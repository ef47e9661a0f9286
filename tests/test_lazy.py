"""`clap.lazy`: a module bound at the top is imported at its first use, and the decorators enter torch's context at
each call — so `clap --help` pays no torch, and a decorated function still runs without autograd."""

import subprocess
import sys

import pytest

from clap import lazy


def test_a_bound_module_is_imported_at_its_first_attribute():
    probe = "clap.evaluate.kv_cache"  # extends transformers' DynamicCache: importing it loads torch
    script = (f"import sys; from clap import lazy; m = lazy.module({probe!r}); "
              f"print({probe!r} in sys.modules, 'torch' in sys.modules); "
              "cls = m.GrowingCache; print(cls.__module__, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False", probe, "True"]


def test_a_module_already_loaded_is_itself_and_a_missing_one_fails_at_its_use():
    assert lazy.module("json") is sys.modules["json"]
    missing = lazy.module("clap.no_such_module")  # binding costs nothing and cannot fail
    with pytest.raises(ModuleNotFoundError, match="clap.no_such_module"):
        _ = missing.anything


@pytest.mark.parametrize("decorate, grad_enabled, inference", [
    (lazy.inference_mode, False, True),
    (lazy.no_grad, False, False),
])
def test_the_decorators_enter_torchs_context_at_each_call(decorate, grad_enabled, inference):
    import torch

    @decorate
    def inside(x):
        """doc kept"""
        return torch.is_grad_enabled(), torch.is_inference_mode_enabled(), x * 2

    assert inside(torch.ones(2, requires_grad=True))[:2] == (grad_enabled, inference)
    assert inside.__doc__ == "doc kept" and torch.is_grad_enabled()  # the context ends with the call
