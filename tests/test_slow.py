"""Slower tests: the real SmolLM2 through materialize → admit → SFT, and SFT under `accelerate launch`
with two CPU processes. Run alone with `pytest -m slow`."""

import copy
import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file
from tests.conftest import ROOT


@pytest.mark.slow
def test_real_smollm2_sft_few_steps(params, small_loop, smollm2_dir, tmp_path):
    from clap.stages import train_sft

    cfg = copy.deepcopy(params)
    cfg.train.sft = cfg.train.sft.model_copy(update=dict(max_steps=2, logging_steps=1, save_steps=100, per_device_batch_size=2,
                               gradient_accumulation=1))
    before = load_file(str(smollm2_dir / "model.safetensors"))
    m = train_sft.run(cfg.train, small_loop / "materialized", small_loop / "admission", ["b1"], smollm2_dir,
                      tmp_path / "sft", tmp_path / "ckpt")
    assert m["status"] == "ok" and m["steps"] == 2 and m["train_loss"] < 10
    adapter = load_file(str(tmp_path / "sft/adapter/adapter_model.safetensors"))
    assert any(v.abs().sum() > 0 for k, v in adapter.items() if "lora_B" in k)
    after = load_file(str(smollm2_dir / "model.safetensors"))
    assert all(torch.equal(before[k], after[k]) for k in list(before)[:20])
    card = (tmp_path / "sft/adapter/README.md").read_text()
    assert "SmolLM2-135M-Instruct" in card


@pytest.mark.slow
def test_accelerate_two_cpu_processes_train_the_same_adapter(small_loop, tiny_dir, tmp_path):
    """`accelerate launch` with conf/accelerate/cpu2.yaml: two gloo processes on the CPU."""
    out = tmp_path / "ddp"
    env = os.environ | {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-m", "accelerate.commands.launch", "--config_file",
                        str(ROOT / "conf/accelerate/cpu2.yaml"), str(ROOT / "tests/helpers/ddp_train.py"),
                        str(small_loop), str(tiny_dir), str(out)], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    ranks = [json.loads((out / f"rank{i}.json").read_text()) for i in (0, 1)]
    assert [x["world"] for x in ranks] == [2, 2] and ranks[0]["step"] == ranks[1]["step"] == 3
    assert ranks[0]["lora_sha256"] == ranks[1]["lora_sha256"], "DDP ranks must hold identical LoRA weights"
    assert (out / "sft/adapter/adapter_model.safetensors").exists() and not (out / "rank2.json").exists()
