"""Exports of a released adapter: merged safetensors that plain transformers loads in a clean process and that answer
as the adapter does; a GGUF whose round trip is checked; refusals in one line."""

import json
import subprocess
import sys

import pytest
import torch
from tests.release.test_serving_bundle_release import _commit_version, repo  # noqa: F401  (the fixture)

from clap.model import load_model
from clap.release import export as ex
from clap.release import registry as release

ANSWER_IN_A_CLEAN_PROCESS = """
import json, sys, torch
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32).eval()
ids = torch.tensor([[1, 17, 42, 99, 5, 300]])
with torch.inference_mode():
    print(json.dumps(model.generate(input_ids=ids, max_new_tokens=8, do_sample=False)[0].tolist()))
"""


def test_the_merged_export_loads_in_a_clean_process_and_answers_as_the_adapter(repo, tiny_dir, tmp_path):  # noqa: F811
    root, params = repo
    _commit_version(root, tiny_dir, params, 1)
    release.release(root)
    out = tmp_path / "merged"
    r = subprocess.run(["clap", "export", "v0.0.1", "--merged", str(out)], cwd=root, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    record = json.loads((out / "export.json").read_text())
    assert record["tag"] == "clap-adapter@v0.0.1" and len(record["bundle_sha256"]) == 64
    assert not list(out.glob("*.bin")) and not list(out.glob("adapter_*"))  # merged weights only, safetensors
    card = (out / "README.md").read_text()
    assert "gate_decision: promote" in card and "Gate decision: **promote**" in card and "license:" in card

    clean = subprocess.run([sys.executable, "-c", ANSWER_IN_A_CLEAN_PROCESS, str(out)], capture_output=True, text=True)
    assert clean.returncode == 0, clean.stderr[-2000:]
    from clap.integrity import load_adapter, pinned_expectation
    from clap.model import identity

    base = root / "models" / "base"
    adapter = root / "models" / "sft" / "adapter"
    with_adapter = load_adapter(load_model(base), adapter, pinned_expectation(root, adapter, "clap-adapter@v0.0.1"),
                                identity(base)).eval()
    with torch.inference_mode():
        expected = with_adapter.generate(input_ids=torch.tensor([[1, 17, 42, 99, 5, 300]]), max_new_tokens=8,
                                         do_sample=False)[0].tolist()
    assert json.loads(clean.stdout.strip().splitlines()[-1]) == expected

    again = subprocess.run(["clap", "export", "v0.0.1", "--merged", str(out)], cwd=root, capture_output=True, text=True)
    assert again.returncode == 0  # its own earlier export is replaced
    foreign = tmp_path / "someone-elses"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    r = subprocess.run(["clap", "export", "v0.0.1", "--merged", str(foreign)], cwd=root, capture_output=True, text=True)
    assert r.returncode == 2 and "was not written by clap export" in r.stdout and "Traceback" not in r.stdout + r.stderr
    assert (foreign / "notes.txt").read_text() == "mine"
    r = subprocess.run(["clap", "export", "v0.0.1", "--gguf", str(tmp_path / "x.gguf")], cwd=root, capture_output=True,
                       text=True)  # this base is a folder: no GGUF to take the tokenizer from
    assert r.returncode == 2 and "did not come from a GGUF" in r.stdout and not (tmp_path / "x.gguf").exists()
    r = subprocess.run(["clap", "export", "v9.9.9", "--merged", str(tmp_path / "m9")], cwd=root, capture_output=True,
                       text=True)
    assert r.returncode == 2 and "v9.9.9" in r.stdout and "Traceback" not in r.stdout + r.stderr


def test_a_gguf_written_from_merged_weights_reads_back_with_the_same_answers(tiny_dir, tmp_path):
    """A tiny Llama with a merged random LoRA (q, k: llama.cpp's rotary order must be undone on the way back) into a
    GGUF carrying the packaged SmolLM2 GGUF's tokenizer; transformers' GGUF loader reads it back."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoTokenizer

    from clap.model import gguf_path

    model = get_peft_model(load_model(tiny_dir), LoraConfig(r=4, target_modules=["q_proj", "k_proj", "down_proj"],
                                                            init_lora_weights=False))
    merged_dir = tmp_path / "merged"
    model.merge_and_unload().save_pretrained(merged_dir, safe_serialization=True)
    AutoTokenizer.from_pretrained(tiny_dir).save_pretrained(merged_dir)
    out = tmp_path / "tiny.gguf"
    ex.write_gguf(merged_dir, gguf_path("smollm2"), out, "LLAMA")
    check = ex.check_gguf(merged_dir, out, max_new_tokens=8)
    assert check["passed"] and check["answers_equal"] == check["prompts"] == 3, check
    assert check["max_abs_logit_diff"] <= ex.GGUF_LOGIT_TOLERANCE


@pytest.mark.parametrize("n_head, n_kv", [(4, 4), (4, 2)])
def test_the_rotary_reorder_is_llama_cpps_permute(n_head, n_kv):
    import numpy as np

    head_dim, hidden = 6, 8
    w = np.arange(n_kv * head_dim * hidden, dtype=np.float32).reshape(n_kv * head_dim, hidden)
    out = ex._rotary_order(w, n_head, n_kv)
    # per head: rows [0, 3, 1, 4, 2, 5] — each first-half row followed by its partner from the second half
    assert np.array_equal(out[:head_dim], w[[0, 3, 1, 4, 2, 5]]) and sorted(out.sum(1)) == sorted(w.sum(1))


def test_dvc_artifacts_get_retrieves_the_adapter_a_version_shipped(repo, tiny_dir, tmp_path):  # noqa: F811
    """dvc.yaml's `artifacts:` entry and GTO's tag name the same bytes: `dvc artifacts get REPO clap-adapter --rev v0.0.1`
    fetches the adapter `clap bundle` copied to models/shipped/adapter at that release."""
    import shutil

    import yaml
    from tests.conftest import ROOT
    from tests.release.test_serving_bundle_release import _fake_run, sh

    from clap import paths
    from clap.domain.contracts import EvidenceBundle
    from clap.release import bundle

    root, params = repo
    artifacts = yaml.safe_load((ROOT / "dvc.yaml").read_text())["artifacts"]
    assert artifacts[paths.ARTIFACT]["path"] == f"{paths.SHIPPED.as_posix()}/adapter"  # one definition: paths.py
    (root / "dvc.yaml").write_text(yaml.safe_dump({"artifacts": artifacts}))
    _fake_run(root, tiny_dir, params, "promote", 1)
    shipped = EvidenceBundle.model_validate_json((root / "release/bundle.json").read_text())
    bundle.write_shipped(root, shipped, paths.adapter("sft"), paths.SHIPPED)
    sh(root, "dvc", "add", "-q", "data/materialized", "models/sft", "models/shipped")
    sh(root, "git", "add", "-A")
    sh(root, "git", "commit", "-qm", "run 1")
    assert release.release(root)["version"] == "v0.0.1"
    sh(root, "dvc", "push", "-q")
    shutil.rmtree(root / ".dvc" / "cache")  # from the remote, as a consumer elsewhere gets it
    out = tmp_path / "got"
    sh(tmp_path, "dvc", "artifacts", "get", str(root), paths.ARTIFACT, "--rev", "v0.0.1", "-o", str(out))
    for name in ("adapter_model.safetensors", "adapter_config.json", "manifest.json"):
        assert (out / name).read_bytes() == (root / "models" / "sft" / "adapter" / name).read_bytes(), name
    flipped = root / "models" / "sft" / "adapter" / "adapter_model.safetensors"
    data = bytearray(flipped.read_bytes())
    data[-1] ^= 0xFF
    flipped.write_bytes(bytes(data))
    with pytest.raises(bundle.BundleMismatch, match="differs from the bundle it ships with"):
        bundle.write_shipped(root, shipped, paths.adapter("sft"), paths.SHIPPED)
