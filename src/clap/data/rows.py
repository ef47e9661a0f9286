"""The rows a batch's sets hold: SFT samples (the offline extraction task, or the application's prompt over the chunks
its retriever returns), the decision task's SFT cold start, and replay cases.

    clap materialize --batch b1          (the stage, `clap.stages.materialize`, that writes them)
"""

from __future__ import annotations

import random
from pathlib import Path

import pandas as pd

from clap.domain import prompts
from clap.domain import quantities as nz
from clap.io import content_hash
from clap.retrieval import BM25Index


def project_units(assets: Path) -> list[str]:
    """The units the extraction prompt names: every unit of the registry (`clap.domain.quantities.UNITS`, in its
    order) in a dimension the project's facts use, over every batch — so a batch's prompt depends neither on which
    batch it is nor on one batch writing `元` where the others write `万元` (a shifted export); `""` among them when
    a fact has no unit (a count of rights, tonnes written in a header)."""
    used = {nz.canonical_unit(u) for u in pd.read_parquet(assets / "facts.parquet", columns=["unit"])["unit"].dropna()}
    dims = {nz.UNITS[u][0] for u in used if u is not None}
    return [u for u, (dim, _) in nz.UNITS.items() if dim in dims]


def retrieved(facts: pd.DataFrame, pool: pd.DataFrame, k: int) -> dict[str, list[str]]:
    """The chunk ids the application's BM25 retriever returns for each fact's question, from `pool`."""
    if facts.empty or pool.empty:
        return {}
    hits = BM25Index(pool["chunk_id"].tolist(), pool["text"].tolist()).search(facts["question"].tolist(), k)
    return dict(zip(facts["record_id"], hits))


def sft_rows(df: pd.DataFrame, split: str, chunk_by_id: dict, contexts: dict[str, list[str]], seed: int,
              app_share: float, system_extract: str) -> list[dict]:
    """One sample per fact; with probability `app_share` (drawn per record, so a row's form does not depend on
    which other rows the batch holds) in the application's prompt over its retrieved chunks, else the offline
    extraction task under `system_extract`."""
    rows = []
    for f in df.to_dict("records"):
        rng = random.Random(content_hash(seed, "form", f["record_id"]))
        gold = chunk_by_id[f["chunk_id"]]
        if rng.random() < app_share and f["record_id"] in contexts:
            context = [chunk_by_id[c] for c in contexts[f["record_id"]]]
            if gold["chunk_id"] not in contexts[f["record_id"]]:  # retrieval missed it: the gold takes a random slot, as a better retriever would
                context[rng.randrange(len(context))] = gold
            system, prompt, target = prompts.SYSTEM_APP, prompts.app_prompt(f["question"], context), \
                prompts.target_json(f, with_location=True)
            source = "\n\n".join(c["text"] for c in context)
        else:
            system, prompt, target = system_extract, prompts.extraction_prompt(f["question"], gold), \
                prompts.target_json(f)
            source = gold["text"]
        rows.append({"sample_id": content_hash(system, prompt, target)[:16], "record_id": f["record_id"], "batch": f["batch"],
                     "split": split, "system": system, "prompt": prompt, "source": source, "target": target,
                     "question": f["question"], "chunk_id": f["chunk_id"], "content_hash": content_hash(prompt, target)})
    return rows


def decision_sft_rows(groups: list[dict], batch: str) -> list[dict]:
    """The SFT cold start of the decision task: each train case's original recommendation as the target,
    so DPO and GRPO start from a policy that already answers the decision format."""
    return [{"sample_id": content_hash(prompts.SYSTEM_DECIDE, g["prompt"], g["reference_json"])[:16],
             "record_id": g["record_id"], "batch": batch, "split": "train", "system": prompts.SYSTEM_DECIDE,
             "prompt": g["prompt"], "source": g["prompt"], "target": g["reference_json"], "question": "",
             "chunk_id": "", "content_hash": content_hash(g["prompt"], g["reference_json"])} for g in groups]


def replay_rows(df: pd.DataFrame) -> list[dict]:
    """One replay case per fact: its question, and the gold answer with the chunk, document and page it is on."""
    return [{"case_id": f"rc-{f['record_id']}", "record_id": f["record_id"], "batch": f["batch"],
             "question": f["question"], "gold_chunk_id": f["chunk_id"], "gold_doc_id": f["doc_id"],
             "gold_page": int(f["page"]), "target": prompts.target_json(f, with_location=True)}
            for f in df.to_dict("records")]
