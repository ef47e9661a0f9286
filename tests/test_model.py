"""`clap.model` decisions that depend on the hardware, as table tests over stubbed capabilities."""

import pytest
import torch

from clap.model import inference_dtype, use_bf16


@pytest.mark.parametrize("setting, cuda, cuda_bf16, avx512_bf16, amx, expected", [
    ("on", False, False, False, False, True),     # asked for: on, whatever the machine
    (True, False, False, False, False, True),
    ("off", True, True, True, True, False),       # asked off: fp32 even where bf16 is native
    (False, True, True, True, True, False),
    ("auto", False, False, False, False, False),  # a CPU without bf16 instructions: emulated bf16 is slower, fp32
    ("auto", False, False, True, False, True),    # AVX512-BF16 (this VM's EPYC)
    ("auto", False, False, False, True, True),    # AMX tiles (Sapphire Rapids and later)
    ("auto", True, True, False, False, True),     # CUDA with bf16 (Ampere and later)
    ("auto", True, False, True, True, False),     # CUDA without bf16 (e.g. T4): the GPU decides, not the host CPU
])
def test_bf16_is_on_where_it_is_native_or_asked(setting, cuda, cuda_bf16, avx512_bf16, amx, expected, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: cuda_bf16)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx, raising=False)
    assert use_bf16(setting) is expected


def test_a_torch_without_the_cpu_probes_means_fp32(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported", raising=False)
    monkeypatch.delattr(torch.cpu, "_is_amx_tile_supported", raising=False)
    assert use_bf16("auto") is False


@pytest.mark.parametrize("setting, cuda, cuda_bf16, avx512_bf16, expected", [
    ("float32", True, True, True, torch.float32),     # asked for: whatever the machine
    ("bfloat16", False, False, False, torch.bfloat16),
    ("auto", False, False, True, torch.bfloat16),     # a CPU with native bf16: the demo machine
    ("auto", False, False, False, torch.float32),     # a CPU without: emulated bf16 is slower
    ("auto", True, True, False, torch.bfloat16),      # CUDA with bf16
    ("auto", True, False, True, torch.float16),       # CUDA without bf16 (T4): fp16, the GPU decides
])
def test_answers_decode_in_bf16_where_it_is_native(setting, cuda, cuda_bf16, avx512_bf16, expected, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: cuda_bf16)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    assert inference_dtype(setting) is expected
