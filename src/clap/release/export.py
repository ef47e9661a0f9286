"""A released adapter, exported where other tools load it: merged into its base (plain transformers) or as a GGUF
(llama.cpp, Ollama, LM Studio).

    clap export v0.0.2 --merged exports/v0.0.2        # safetensors, base + adapter merged, with its model card
    clap export v0.0.2 --gguf exports/v0.0.2.gguf     # the merged model as an F32 GGUF, round-trip checked

The adapter is restored from the DVC cache and checked against the bundle at its release tag before a byte is
merged, and the export records what it came from (`export.json`: the version, the bundle's sha256, the adapter's
and the base's hashes, the merged weights' sha256). The model card is written through `huggingface_hub.ModelCard`:
licence, base, the datasets as DVC hashes, the gate's decision and the holdout results in its `model-index`.

GGUF: the tokenizer and its metadata come from the GGUF the base was dequantised from (the packaged SmolLM2, or a
`.gguf` given as `model.base`), so nothing is re-derived; the tensors are the merged weights under llama.cpp's names
(`gguf.get_tensor_name_map`), q/k rows in llama.cpp's rotary order. The file is then loaded back (transformers'
GGUF loader) and its greedy answers to a few prompts must equal the merged model's, its logits within
`GGUF_LOGIT_TOLERANCE`: a file that fails is deleted. A base from a Hub id or folder has no GGUF to take the
tokenizer from: convert the merged folder with llama.cpp's `convert_hf_to_gguf.py`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from clap import model as base_model
from clap import paths
from clap.config import Params
from clap.domain.contracts import EvidenceBundle
from clap.errors import UserError
from clap.integrity import attach
from clap.io import atomic_dir, git_text, loads_strict, read_json, read_json_if_exists, sha256_file, write_json
from clap.model import GEMMA_NOTICE, PACKAGED, gguf_path, licence
from clap.release.prod import restore_version_adapter
from clap.release.registry import current

GGUF_ARCHS = {"LlamaForCausalLM": "LLAMA"}  # architectures whose GGUF layout this writer knows (SmolLM2, Llama)
GGUF_LOGIT_TOLERANCE = 1e-3  # max |logit difference| between the GGUF read back and the merged model (F32 both)
CHECK_PROMPTS = ("What was the company's revenue in 2023?", "List two risks named in the filing.",
                 "Answer in JSON: the net profit and its unit.")


class ExportRefused(UserError, RuntimeError):
    """The export cannot be made as asked; the message names the version, file or setting."""


def released_adapter(root: Path, version: str | None) -> tuple[str, Path, dict]:
    """(version, adapter folder, the manifest the release pins): `version`, or the one in prod; restored from the DVC
    cache into models/serving/<version>/adapter and checked against its bundle."""
    root = Path(root)
    if version is None:
        holder = current(root, "prod")
        if holder is None:
            raise ExportRefused("nothing is in prod: name the version to export (clap export vX.Y.Z ...)")
        version = holder["version"]
    folder, expected = restore_version_adapter(root, version, root / paths.MODELS / "serving" / version / "adapter")
    return version, folder, expected


def export_merged(root: Path, cfg: Params, version: str | None, out: Path) -> dict:
    """The base with the version's adapter merged, as safetensors + tokenizer + model card in `out` (replaced only
    when an earlier `clap export` wrote it). Returns the export record."""
    import torch

    root, out = Path(root), Path(out)
    _refuse_foreign(out)
    version, folder, expected = released_adapter(root, version)
    base = base_model.resolve(cfg.model)
    ident = base_model.identity(base)
    model = attach(base_model.load_model(base, dtype=torch.float32), "default", folder, expected, ident)
    merged = model.merge_and_unload()
    tag = f"{paths.ARTIFACT}@{version}"
    with atomic_dir(out) as tmp:
        merged.save_pretrained(tmp, safe_serialization=True)
        base_model.load_tokenizer(base).save_pretrained(tmp)
        weights = sorted(tmp.glob("*.safetensors"))
        record = {"version": version, "tag": tag, "bundle_sha256": _bundle_sha256(root, tag),
                  "adapter_sha256": expected["files"][paths.ADAPTER_WEIGHTS],
                  "base_model": {k: ident[k] for k in ("name", "hub_id", "weights_sha256") if k in ident},
                  "merged_weights_sha256": {w.name: sha256_file(w) for w in weights}}
        model_card(root, tag, ident).save(tmp / "README.md")
        write_json(tmp / "export.json", record)
    return record


def export_gguf(root: Path, cfg: Params, version: str | None, out_file: Path, scratch: Path) -> dict:
    """The merged model as an F32 GGUF at `out_file`, round-trip checked (`check_gguf`). `scratch`: where the merged
    folder is written on the way (kept: it is the `--merged` export too)."""
    out_file = Path(out_file)
    base = base_model.resolve(cfg.model)
    manifest = read_json_if_exists(Path(base) / paths.MANIFEST) or {}
    if not manifest.get("gguf_sha256"):
        raise ExportRefused(f"model.base {cfg.model.base!r} did not come from a GGUF, whose tokenizer metadata "
                            "the export reuses: export --merged and convert that folder with llama.cpp's "
                            "convert_hf_to_gguf.py")
    arch = (read_json_if_exists(Path(base) / "config.json") or {}).get("architectures", ["?"])[0]
    if arch not in GGUF_ARCHS:
        raise ExportRefused(f"{arch}: the GGUF export writes {', '.join(GGUF_ARCHS)} only; export --merged and "
                            "convert it with llama.cpp's convert_hf_to_gguf.py")
    record = export_merged(root, cfg, version, scratch)
    source = _source_gguf(manifest, Path(root), Path(scratch).parent)
    if out_file.exists() and not (out_file.with_suffix(".gguf.json")).exists():
        raise ExportRefused(f"{out_file}: exists and was not written by clap export; choose another path")
    tmp = out_file.with_name(out_file.name + ".tmp")
    try:
        write_gguf(Path(scratch), source, tmp, GGUF_ARCHS[arch])
        check = check_gguf(Path(scratch), tmp)
        if not check["passed"]:
            raise ExportRefused(f"{out_file}: the GGUF read back does not answer as the merged model "
                                f"({check['answers_equal']}/{check['prompts']} answers equal, max |Δlogit| "
                                f"{check['max_abs_logit_diff']:.2e} > {GGUF_LOGIT_TOLERANCE})")
        tmp.replace(out_file)
    finally:
        tmp.unlink(missing_ok=True)
    record = record | {"gguf": out_file.name, "gguf_sha256": sha256_file(out_file), "round_trip": check,
                       "gguf_type": "F32"}
    write_json(out_file.with_suffix(".gguf.json"), record)
    return record


def write_gguf(merged_dir: Path, source_gguf: Path, out_file: Path, arch: str) -> None:
    """The merged weights as an F32 GGUF whose metadata (tokenizer, chat template) is the source GGUF's, its
    hyperparameters the merged config's and the file type F32. Tensors keep the source's order and names, and tied
    embeddings stay tied (no `output.weight` when the source has none)."""
    import gguf

    reader = gguf.GGUFReader(str(source_gguf))
    config = read_json(merged_dir / "config.json")
    by_gguf_name = _llama_cpp_tensors(merged_dir, config, arch)
    arch_name = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(str(out_file), arch=arch_name)
    hyper = {  # from the merged model's own config, not the source file's: the two must describe the same tensors
        "block_count": (writer.add_block_count, config["num_hidden_layers"]),
        "context_length": (writer.add_context_length, config["max_position_embeddings"]),
        "embedding_length": (writer.add_embedding_length, config["hidden_size"]),
        "feed_forward_length": (writer.add_feed_forward_length, config["intermediate_size"]),
        "attention.head_count": (writer.add_head_count, config["num_attention_heads"]),
        "attention.head_count_kv": (writer.add_head_count_kv, config.get("num_key_value_heads",
                                                                         config["num_attention_heads"])),
        "attention.layer_norm_rms_epsilon": (writer.add_layer_norm_rms_eps, config["rms_norm_eps"]),
        "rope.dimension_count": (writer.add_rope_dimension_count,
                                 config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]),
        "vocab_size": (writer.add_vocab_size, config["vocab_size"]),
    }
    theta = config.get("rope_theta") or (config.get("rope_parameters") or {}).get("rope_theta")
    if theta:
        hyper["rope.freq_base"] = (writer.add_rope_freq_base, theta)
    for add, value in hyper.values():
        add(value)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF.") or \
                field.name.removeprefix(f"{arch_name}.") in hyper:
            continue
        value = int(gguf.LlamaFileType.ALL_F32) if field.name == gguf.Keys.General.FILE_TYPE else field.contents()
        sub_type = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, value, field.types[0], sub_type=sub_type)
    source_names = [t.name for t in reader.tensors]
    if config.get("tie_word_embeddings") and "output.weight" not in source_names:
        by_gguf_name.pop("output.weight", None)  # tied to token_embd, as in the source
    order = [n for n in source_names if n in by_gguf_name] + sorted(set(by_gguf_name) - set(source_names))
    for name in order:
        writer.add_tensor(name, by_gguf_name[name])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _llama_cpp_tensors(merged_dir: Path, config: dict, arch: str) -> dict:
    """The merged safetensors as F32 arrays under llama.cpp's tensor names, q and k in its rotary order."""
    import gguf
    import numpy as np
    from safetensors.numpy import load_file

    weights = {}
    for f in sorted(merged_dir.glob("*.safetensors")):
        weights |= load_file(str(f))
    names = gguf.get_tensor_name_map(getattr(gguf.MODEL_ARCH, arch), config["num_hidden_layers"])
    by_gguf_name = {}
    for hf_name, tensor in weights.items():
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if name is None:
            raise ExportRefused(f"{hf_name}: no llama.cpp name for this tensor")
        if hf_name.endswith("q_proj.weight"):
            tensor = _rotary_order(tensor, config["num_attention_heads"], config["num_attention_heads"])
        elif hf_name.endswith("k_proj.weight"):
            tensor = _rotary_order(tensor, config["num_attention_heads"], config.get("num_key_value_heads"))
        by_gguf_name[name] = np.ascontiguousarray(tensor.astype(np.float32))
    return by_gguf_name


def _rotary_order(w, n_head: int, n_head_kv: int | None):
    """llama.cpp's `permute` (convert_hf_to_gguf.py) of a q or k projection: its rows from Hugging Face's rotary
    half-split order into the interleaved order llama.cpp's kernels use (transformers' GGUF loader undoes it)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def check_gguf(merged_dir: Path, gguf_file: Path, prompts: tuple[str, ...] = CHECK_PROMPTS,
               max_new_tokens: int = 24) -> dict:
    """Load `gguf_file` back (transformers' GGUF loader) and compare it with the merged model: greedy answers to
    `prompts` (equal) and the logits of the first prompt (max |difference| ≤ `GGUF_LOGIT_TOLERANCE`)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    merged = AutoModelForCausalLM.from_pretrained(str(merged_dir), dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(str(merged_dir))
    back = AutoModelForCausalLM.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name,
                                                dtype=torch.float32).eval()
    equal, diff = 0, 0.0
    with torch.inference_mode():
        for i, prompt in enumerate(prompts):
            ids = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                          return_tensors="pt", return_dict=True)["input_ids"]
            if i == 0:
                diff = float((merged(input_ids=ids).logits - back(input_ids=ids).logits).abs().max())
            a = merged.generate(input_ids=ids, max_new_tokens=max_new_tokens, do_sample=False)
            b = back.generate(input_ids=ids, max_new_tokens=max_new_tokens, do_sample=False)
            equal += int(torch.equal(a, b))
    return {"prompts": len(prompts), "answers_equal": equal, "max_abs_logit_diff": diff,
            "tolerance": GGUF_LOGIT_TOLERANCE, "passed": equal == len(prompts) and diff <= GGUF_LOGIT_TOLERANCE}


def model_card(root: Path, tag: str, base: dict):
    """The model card of release `tag` (`huggingface_hub.ModelCard`): licence, base, datasets as DVC hashes, the
    gate's decision, and per holdout batch the candidate's overall score in `model-index`."""
    from huggingface_hub import EvalResult, ModelCard, ModelCardData

    bundle = EvidenceBundle.model_validate_json(git_text(root, tag, paths.BUNDLE, ExportRefused))
    results = []
    for batch in bundle.config.get("data", {}).get("batches", []):
        try:
            score = loads_strict(git_text(root, tag, paths.eval_metrics(batch), ExportRefused))["candidate"]["overall_score"]
        except (ExportRefused, KeyError, TypeError, ValueError):
            continue  # a batch without holdout results at that release: not claimed
        results.append(EvalResult(task_type="text-generation", dataset_type="clap-holdout", dataset_name=f"holdout {batch}",
                                  dataset_revision=bundle.dataset_versions.get(batch), metric_type="overall_score",
                                  metric_name="overall score (candidate)", metric_value=score,
                                  verified=False))
    name = tag.replace("@", "-")
    data = ModelCardData(license=licence(base) or "other", library_name="transformers",
                         base_model=base["hub_id"] if base.get("commit") else None, model_name=name,
                         eval_results=results or None, tags=["clap", "lora-merged"],
                         clap={"version": tag, "gate_decision": bundle.decision.get("decision"),
                               "candidate": bundle.candidate, "datasets_dvc": bundle.dataset_versions,
                               "base_weights_sha256": base["weights_sha256"]})
    decision = bundle.decision
    lines = [f"# {name}", "",
             f"The base model {base['name']} ({base['hub_id']}) with CLAP's `{bundle.candidate}` adapter of release "
             f"`{tag}` merged into it.", "",
             f"- Gate decision: **{decision.get('decision')}** (policy {decision.get('policy')}); reasons: "
             + (", ".join(r.get("rule", "?") for r in decision.get("reasons", [])) or "none"),
             f"- Code commit: `{bundle.code_commit}`; configuration sha256 `{bundle.config_sha256}`",
             "- Datasets (DVC hashes): " + ", ".join(f"{k} `{v}`" for k, v in bundle.dataset_versions.items()), ""]
    if base.get("quantised_from"):
        lines += [f"Trained on weights dequantised from {base.get('gguf')} ({base.get('quantisation')}), a "
                  f"quantisation of {base['quantised_from']}: not that model bit for bit.", ""]
    if licence(base) == "gemma":
        lines += [GEMMA_NOTICE, ""]
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(lines))


def _source_gguf(manifest: dict, root: Path, scratch: Path) -> Path:
    """The GGUF the base was dequantised from, checked against the hash its manifest recorded."""
    requested = manifest["requested"]
    path = gguf_path(requested, scratch=scratch) if requested in PACKAGED else (root / requested)
    if not path.is_file() or sha256_file(path) != manifest["gguf_sha256"]:
        raise ExportRefused(f"{path}: not the GGUF the base model was dequantised from (sha256 differs or missing)")
    return path


def _bundle_sha256(root: Path, tag: str) -> str:
    import hashlib

    return hashlib.sha256(git_text(root, tag, paths.BUNDLE, ExportRefused).encode()).hexdigest()


def _refuse_foreign(out: Path) -> None:
    """An output folder is replaced only when an earlier `clap export` made it (its export.json says so)."""
    if out.exists() and any(out.iterdir()) and not (out / "export.json").exists():
        raise ExportRefused(f"{out}: exists and was not written by clap export; choose another folder")
    if out.exists() and (out / "export.json").exists():
        shutil.rmtree(out)
