"""CUDA-only paths: 4-bit QLoRA (bitsandbytes) and the vLLM backend. Skipped without a GPU."""

import copy
import importlib.util

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.mark.skipif(importlib.util.find_spec("bitsandbytes") is None, reason="needs the gpu extra (bitsandbytes)")
def test_qlora_sft_runs_in_4bit(params, small_loop, smollm2_dir, tmp_path):
    from clap.stages import train_sft

    cfg = copy.deepcopy(params)
    cfg.train.sft = cfg.train.sft.model_copy(update=dict(max_steps=2, logging_steps=1, save_steps=100, qlora="on"))
    m = train_sft.run(cfg.train, small_loop / "materialized", small_loop / "admission", ["b1"], smollm2_dir,
                      tmp_path / "sft", tmp_path / "ckpt")
    assert m["qlora"] is True and m["status"] == "ok" and m["steps"] == 2


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs the vllm extra")
def test_vllm_backend_answers_like_the_transformers_engine(smollm2_dir):
    from clap.domain import prompts
    from clap.evaluate.generate import Engine
    from clap.evaluate.generate_vllm import VLLMEngine

    convs = [prompts.messages(prompts.system_extract(["万元", "%"]), f"Source:\nRevenue for FY202{i} was {i},234.5 RMB 10k.\n"
                              f"Question: What was the revenue for FY202{i}?") for i in range(8)]
    hf = [g.text for g in Engine(smollm2_dir).generate(convs, use_adapter=False, max_new_tokens=48, progress=False)]
    vl = [g.text for g in VLLMEngine(smollm2_dir).generate(convs, use_adapter=False, max_new_tokens=48, progress=False)]
    assert sum(a == b for a, b in zip(hf, vl)) >= 7  # greedy on both; bf16 kernels may flip a near-tie token
