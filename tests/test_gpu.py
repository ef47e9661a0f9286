"""CUDA-only paths: 4-bit QLoRA (bitsandbytes) and bf16 training. Skipped without a GPU."""

import copy
import importlib.util

import pytest
import torch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available() or importlib.util.find_spec("bitsandbytes") is None,
                                 reason="needs CUDA and bitsandbytes")]


def test_qlora_sft_runs_in_4bit(params, small_loop, smollm2_dir, tmp_path):
    from clap.stages import train_sft

    cfg = copy.deepcopy(params)
    cfg["train"]["sft"].update(max_steps=2, logging_steps=1, save_steps=100, qlora="on")
    m = train_sft.run(cfg, small_loop / "materialized", small_loop / "admission", ["b1"], smollm2_dir,
                      tmp_path / "sft", tmp_path / "ckpt")
    assert m["qlora"] is True and m["status"] == "ok" and m["steps"] == 2
