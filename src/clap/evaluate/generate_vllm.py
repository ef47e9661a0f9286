"""Optional vLLM backend for evaluate and replay: same interface and outputs as `generate.Engine`.

    pip install -e '.[vllm]'      # on a CUDA machine; conf: generate.backend = auto | hf | vllm

Used when `generate.backend` is `vllm`, or `auto` with vLLM installed and CUDA present (the CPU
path and the tests use `generate.Engine`). Why: paged attention and continuous batching serve
64+ concurrent requests at a throughput the HF `generate` loop cannot reach on a GPU.

Equivalence with the HF engine: prompts are the same token ids (our chat template, not vLLM's),
decoding is greedy (temperature 0), and the text is cut at the end of the first JSON object, as
`Engine` does (vLLM has no per-row stopping callback, so it runs to `max_new_tokens` or EOS and
is cut after). The adapter passes the same verification (`serving.verify_adapter`, against the
manifest pinned in git) before vLLM
loads it, and the baseline is the same base weights without the LoRA request.
Latency is what the application sees: requests go in groups of `batch_size` (the configured
concurrency) and each record carries its group's wall time.
"""

from __future__ import annotations

import time
from pathlib import Path

from clap import model as base_model
from clap.evaluate.answer_store import same_adapter
from clap.evaluate.decoding import answer_naming_metric
from clap.evaluate.generate import Generation, _progress, truncate_at_json_end
from clap.integrity import AdapterRefused, verify_adapter


class VLLMEngine:
    """`VLLMEngine(base_dir, adapter_dir, expected, …, prod_dir, prod_expected)`;
    `engine.generate(msgs, use_adapter=True | False | "prod")`: candidate and prod as LoRA requests."""

    def __init__(self, base_dir: Path, adapter_dir: Path | None = None, expected: dict | None = None,
                 base_identity: dict | None = None, gpu_memory_utilization: float = 0.5, max_lora_rank: int = 64,
                 prod_dir: Path | None = None, prod_expected: dict | None = None, evidence_names_metric: bool = False):
        """`evidence_names_metric`: `generate.evidence_names_metric`. vLLM cannot change a request's grammar mid-answer,
        so an answer whose evidence does not name the metric it wrote, where another quote does, is decoded again
        under the narrowed schema (`decoding.answer_naming_metric`): for greedy answers the one the HF engine's
        narrowing gives in one pass."""
        from vllm import LLM  # the `vllm` extra; imported here so the module loads without it

        self.tok = base_model.load_tokenizer(base_dir)
        self.adapters: dict[str, Path] = {}
        self._pins: dict[str, dict] = {}
        for name, folder, pinned in (("candidate", adapter_dir, expected), ("prod", prod_dir, prod_expected)):
            if folder is None:
                continue
            if pinned is None:
                raise AdapterRefused(f"{folder}: no pinned evidence given; refusing to load")
            verify_adapter(Path(folder), pinned, base_identity or base_model.identity(base_dir))
            self.adapters[name] = Path(folder)
            self._pins[name] = pinned["files"]
        self.adapter = self.adapters.get("candidate")
        self.llm = LLM(model=str(base_dir), tokenizer=str(base_dir), trust_remote_code=False, seed=0,
                       dtype="auto", enable_lora=bool(self.adapters), max_lora_rank=max_lora_rank,
                       max_loras=max(1, len(self.adapters)), gpu_memory_utilization=gpu_memory_utilization)
        self.has_adapter = self.adapter is not None
        self.evidence_names_metric = evidence_names_metric

    def same_adapter(self, a: str, b: str) -> bool:
        """Whether adapters `a` and `b` load the same pinned files (`answer_store.same_adapter`)."""
        return same_adapter(self._pins, a, b)

    def encode(self, messages: list[dict]) -> list[int]:
        return self.tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                            return_dict=True)["input_ids"]

    def generate(self, conversations: list[list[dict]], use_adapter: bool | str, max_new_tokens: int = 96,
                 batch_size: int = 8, progress: bool = True, schemas: list[dict] | None = None,
                 use_store: bool = True) -> list[Generation]:
        """Greedy answers from vLLM (no answer store here: `use_store` is accepted and every call decodes)."""
        from vllm import SamplingParams
        from vllm.lora.request import LoRARequest

        name = "candidate" if use_adapter is True else use_adapter
        if name and name not in self.adapters:
            raise ValueError(f"no {name} adapter loaded" if name != "candidate" else "no adapter loaded")
        lora = LoRARequest(name, list(self.adapters).index(name) + 1, str(self.adapters[name])) if name else None

        def params(schema: dict | None):
            return SamplingParams(temperature=0.0, max_tokens=max_new_tokens, **_structured(schema))

        prompts = [{"prompt_token_ids": self.encode(m)} for m in conversations]
        out = self._answers(prompts, [params(s) for s in (schemas or [None] * len(conversations))], lora, batch_size,
                            progress)
        narrowed = ([answer_naming_metric(schema, gen.text) for schema, gen in zip(schemas, out)]
                    if self.evidence_names_metric and schemas else [])
        again = {i: schema for i, schema in enumerate(narrowed) if schema is not None}
        if again:
            redone = self._answers([prompts[i] for i in again], [params(n) for n in again.values()], lora, batch_size,
                                   False)
            for i, gen in zip(again, redone):
                out[i] = Generation(gen.text, gen.new_tokens, out[i].latency_ms + gen.latency_ms)
        return out

    def _answers(self, prompts: list[dict], params: list, lora, batch_size: int, progress: bool) -> list[Generation]:
        out: list[Generation] = []
        bar = _progress(len(prompts), progress)
        for s in range(0, len(prompts), batch_size):
            t0 = time.perf_counter()
            results = self.llm.generate(prompts[s:s + batch_size], params[s:s + batch_size], lora_request=lora,
                                        use_tqdm=False)
            ms = (time.perf_counter() - t0) * 1000
            for r in results:
                text = truncate_at_json_end(r.outputs[0].text)
                kept = len(self.tok.encode(text, add_special_tokens=False)) if text != r.outputs[0].text else None
                out.append(Generation(text=text, new_tokens=kept if kept is not None else len(r.outputs[0].token_ids),
                                      latency_ms=ms))
            if bar:
                bar.update(len(results))
        if bar:
            bar.close()
        return out


def _structured(schema: dict | None) -> dict:
    """vLLM's structured-output request for one JSON schema (its default backend is xgrammar, the
    grammar the HF engine applies), across the two names vLLM has used for it."""
    if schema is None:
        return {}
    try:
        from vllm.sampling_params import StructuredOutputsParams

        return {"structured_outputs": StructuredOutputsParams(json=schema)}
    except ImportError:
        from vllm.sampling_params import GuidedDecodingParams

        return {"guided_decoding": GuidedDecodingParams(json=schema)}


def choose_backend(requested: str, vllm_installed: bool, cuda: bool) -> str:
    """`hf` or `vllm` for a configured `generate.backend` (pure: tests give every combination).

    `auto` takes vLLM only when it is installed and CUDA is present; asking for `vllm` without
    them fails with the reason instead of silently measuring a different engine.
    """
    if requested not in ("auto", "hf", "vllm"):
        raise ValueError(f"generate.backend must be auto, hf or vllm, not {requested!r}")
    if requested == "hf":
        return "hf"
    if vllm_installed and cuda:
        return "vllm"
    if requested == "vllm":
        missing = " and ".join(m for m, ok in (("the vllm package (pip install -e '.[vllm]')", vllm_installed),
                                              ("a CUDA device", cuda)) if not ok)
        raise RuntimeError(f"generate.backend=vllm needs {missing}")
    return "hf"
