"""Batch generation on Ray Data: evaluate's and replay's requests spread over workers, one engine each.

    generate.ray_workers: 4        # conf/config.yaml: evaluate and replay generate on 4 Ray actors

Each actor builds the engine the stage would build here — `generate.Engine` on CPUs, `VLLMEngine` with
one GPU per actor — from the same arguments, so every adapter is attached through the serving check
on the node that serves it. Conversations go out in blocks of `batch_size` and the answers come back
in request order, the same answers one engine gives (greedy decoding of the same token ids; checked on
a tiny model by tests/data/test_assetize_engines.py). The cluster is the one `RAY_ADDRESS` names, else a
local one of `ray_workers` CPUs. For 100k+ requests: each actor loads the model once per `generate`.
"""

from __future__ import annotations

import json

from clap.data.engine import ensure_ray
from clap.evaluate.answer_store import same_adapter
from clap.evaluate.generate import Engine, Generation
from clap.evaluate.generate_vllm import VLLMEngine


class _Generator:
    """A Ray Data callable class: one engine per actor, a block of conversations per call."""

    def __init__(self, engine_args: dict, backend: str):
        if backend == "vllm":
            self.engine = VLLMEngine(**engine_args)
        else:
            self.engine = Engine(**{k: v for k, v in engine_args.items() if k not in ("base_identity",
                                                                                      "gpu_memory_utilization")})

    def __call__(self, batch: dict, **generate_kwargs) -> dict:
        conversations = [json.loads(c) for c in batch["conversation"]]
        schemas = [json.loads(s) for s in batch["schema"]] if batch["schema"][0] else None
        gens = self.engine.generate(conversations, progress=False, schemas=schemas, **generate_kwargs)
        return {"i": batch["i"], "text": [g.text for g in gens], "new_tokens": [g.new_tokens for g in gens],
                "latency_ms": [g.latency_ms for g in gens]}


class RayEngine:
    """`RayEngine(engine_args, workers, backend).generate(...)`: `generate.Engine.generate` over Ray actors."""

    def __init__(self, engine_args: dict, workers: int, backend: str = "hf"):
        self.engine_args, self.workers, self.backend = engine_args, workers, backend
        self.adapters = [name for name, key in (("candidate", "adapter_dir"), ("prod", "prod_dir"))
                         if engine_args.get(key) is not None]
        self.has_adapter = "candidate" in self.adapters

    def same_adapter(self, a: str, b: str) -> bool:
        """Whether adapters `a` and `b` load the same pinned files (`answer_store.same_adapter`)."""
        pins = {name: self.engine_args[key]["files"] for name, key in (("candidate", "expected"), ("prod", "prod_expected"))
                if self.engine_args.get(key)}
        return same_adapter(pins, a, b)

    def generate(self, conversations: list[list[dict]], use_adapter: bool | str, max_new_tokens: int = 96,
                 batch_size: int = 8, progress: bool = True, schemas: list[dict] | None = None,
                 temperature: float = 0.0, use_store: bool = True) -> list[Generation]:
        """Answers from the Ray actors (no answer store here: `use_store` is accepted and every call decodes)."""
        if not conversations:
            return []
        ensure_ray(self.workers)
        import ray.data

        items = [{"i": i, "conversation": json.dumps(c, ensure_ascii=False),
                  "schema": json.dumps(schemas[i]) if schemas is not None else ""} for i, c in enumerate(conversations)]
        blocks = max(1, min(len(items) // batch_size + 1, self.workers * 4))
        rows = ray.data.from_items(items, override_num_blocks=blocks).map_batches(
            _Generator, fn_constructor_kwargs={"engine_args": self.engine_args, "backend": self.backend},
            fn_kwargs={"use_adapter": use_adapter, "max_new_tokens": max_new_tokens, "batch_size": batch_size,
                       "temperature": temperature},
            batch_size=batch_size, concurrency=self.workers, num_cpus=1,
            num_gpus=1 if self.backend == "vllm" else 0).take_all()
        rows.sort(key=lambda r: int(r["i"]))
        return [Generation(text=r["text"], new_tokens=int(r["new_tokens"]), latency_ms=float(r["latency_ms"]))
                for r in rows]
