"""The engines the commands answer with, built in one place: which backend (the HF engine, vLLM, either on Ray
actors), which adapters it holds, each checked against its pin before it loads, and the decoding settings every
command passes alike.

    clap evaluate b1 / clap replay           → said_extraction_engine (the candidate, prod, the base)
    clap evaluate-decisions                  → chain_engine (every chain step, prod, the base)
    clap agent-pairs / clap evaluate-agent   → clap.agent.engine.agent_engine (built on these)
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from clap import model, paths
from clap.config import Generate, Model
from clap.evaluate.generate import Engine
from clap.evaluate.generate_ray import RayEngine
from clap.evaluate.generate_vllm import VLLMEngine, choose_backend
from clap.integrity import pinned_expectation
from clap.io import read_json_if_exists


def answer_store(generate: Generate) -> Path | None:
    """Where greedy answers are reused by content (`generate.reuse_answers`), or None.

    The store belongs to the workspace DVC names in `DVC_ROOT`: `dvc exp run --queue` runs each experiment in a copy
    under `.dvc/tmp/exps/` and points `DVC_ROOT` at the workspace it was queued from, so a sweep's experiments share
    one store and re-decode only the models their change touched. Outside DVC, the current directory's."""
    if not generate.reuse_answers:
        return None
    return Path(os.environ.get("DVC_ROOT", ".")) / paths.ANSWER_STORE


def decoding(generate: Generate) -> dict:
    """The HF engine's decoding settings every command passes alike (`generate.dtype`, `.jump_forward`,
    `.merge_adapters`, `.evidence_names_metric`)."""
    return {"dtype": generate.dtype, "jump_forward": generate.jump_forward, "merge_adapters": generate.merge_adapters,
            "evidence_names_metric": generate.evidence_names_metric}


def pinned_adapters(names: list[str]) -> list[tuple[str, Path, dict]]:
    """(name, `models/<name>/adapter`, the manifest dvc.lock pins for it) per name: what an engine holds besides
    the base model."""
    return [(n, paths.adapter(n), pinned_expectation(Path("."), paths.adapter(n))) for n in names]


def prod_baseline(prod: Path | None, role: str = "adapter") -> tuple[Path | None, dict | None, str | None]:
    """The restored prod adapter folder, the manifest its release tag's bundle pins and a line saying which
    release it is — (None, None, None): no prod, or, for `role="agent_adapter"`, a release in prod that shipped no
    agent adapter."""
    ptr = read_json_if_exists(prod / "prod.json") if prod is not None else None
    folder = None if prod is None else prod / "adapter" if role == "adapter" else paths.prod_agent_adapter(prod)
    if not (ptr and ptr.get("version")) or (role != "adapter" and not folder.is_dir()):
        return None, None, None
    # the agent adapter of a release that kept prod's is pinned by the release it came from (`agent_version`)
    version = ptr.get("agent_version", ptr["version"]) if role == "agent_adapter" else ptr["version"]
    tag = f"{paths.ARTIFACT}@{version}"
    line = f"baseline: prod {ptr['version']} ({tag}, {role.replace('_', ' ')}) and the base model"
    return folder, pinned_expectation(Path("."), folder, tag, role), line


def said_extraction_engine(generate: Generate, base_section: Model, adapter: Path | None, prod: Path | None):
    """The extraction engine with prod as its baseline, for a stage's `main`: yields the lines that say which prod
    release is the baseline and which backend answers (printed before the long work), returns the engine —
    `engine = yield from said_extraction_engine(...)`."""
    prod_dir, prod_expected, line = prod_baseline(prod)
    if line:
        yield line
    engine, backend = extraction_engine(generate, base_section, adapter, prod_dir, prod_expected)
    yield f"generation backend: {backend}"
    return engine


def reuse_lines(engine) -> list[str]:
    """What the answer store spared this command (`generate.reuse_answers`): answers and log-probabilities read
    back instead of computed, as lines; none when the engine keeps no store or was asked nothing."""
    store, lines = getattr(engine, "store", None), []
    if store is not None and store.hits + store.misses:
        lines.append(f"answers reused from {store.root}: {store.hits} of {store.hits + store.misses} requests "
                     "(greedy, or sampled with a seed)")
    if store is not None and store.scores_reused + store.scores_missed:
        lines.append(f"log-probabilities reused from {store.root}: {store.scores_reused} of "
                     f"{store.scores_reused + store.scores_missed} scored completions")
    return lines


def extraction_engine(generate: Generate, base_section: Model, adapter: Path | None, prod_dir: Path | None,
                      prod_expected: dict | None):
    """(engine, backend): the candidate verified against the hashes dvc.lock pins, the adapter in prod against the
    bundle at its release tag; vLLM when `generate.backend` and the machine allow it, on `generate.ray_workers`
    Ray actors when asked."""
    import torch

    base = model.resolve(base_section)
    expected = pinned_expectation(Path("."), adapter) if adapter is not None else None
    backend = choose_backend(generate.backend, importlib.util.find_spec("vllm") is not None,
                             torch.cuda.is_available())
    args = {"base_dir": base, "adapter_dir": adapter, "expected": expected, "prod_dir": prod_dir,
            "prod_expected": prod_expected}
    if backend == "vllm":
        args |= {"base_identity": model.identity(base), "gpu_memory_utilization": generate.gpu_memory_utilization,
                 "evidence_names_metric": generate.evidence_names_metric}
    else:
        args |= decoding(generate)
    if generate.ray_workers:  # the same engine on each of N Ray actors (clap.evaluate.generate_ray)
        return RayEngine(args, generate.ray_workers, backend), backend
    if backend == "vllm":
        return VLLMEngine(**args), backend
    return Engine(**args, answer_store=answer_store(generate)), backend


def chain_engine(generate: Generate, base_section: Model, steps: list[str], prod_dir: Path | None,
                 prod_expected: dict | None):
    """One base model holding every chain step's adapter (`models/<step>/adapter`, each through the serving check)
    and the adapter in prod."""
    return Engine(model.resolve(base_section), prod_dir=prod_dir, prod_expected=prod_expected, others=pinned_adapters(steps),
                  answer_store=answer_store(generate), **decoding(generate))
