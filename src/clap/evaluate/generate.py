"""Generation engine shared by evaluate and replay.

Greedy decoding, length-sorted batches with left padding, KV cache, and a per-row stop as soon as
the JSON answer closes. One base model in memory serves both the baseline and the candidate: the
adapter is attached once and switched off (`disable_adapter`) for the baseline. Outputs equal a
plain one-by-one `generate` loop truncated at the same JSON end (tests/evaluate/test_generate.py checks it).

Under a grammar (`schemas=`), decoding — greedy, or sampled at a temperature (the agent's pass^k runs and
mined draws) — runs its own loop (`decode_under_grammar`): a row leaves
the batch as soon as its answer closes, the head runs on the last position only, and — with
`generate.jump_forward` — what the grammar forces (keys, the rest of a quote once its first words pick
it, that sentence's location) is appended in one forward pass instead of one token per step
(jump-forward decoding, as SGLang does and xgrammar's matcher offers). With `generate.evidence_names_metric`, an
extractive answer's grammar narrows once its metric is written: the evidence is then a quote that names that metric,
when one does (`MetricNarrowing`, `decoding.naming_alternatives`).

Latency is what the application sees: a request served in a batch of `batch_size` concurrent
requests waits for the whole batch, so each record carries its batch's wall time.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from clap import lazy
from clap import model as base_model
from clap.evaluate.answer_store import AnswerStore, model_id
from clap.evaluate.decoding import GrammarCache, naming_alternatives, narrowable, written_metric
from clap.evaluate.merged_lora import MergedAdapters
from clap.evaluate.metrics import object_end
from clap.evaluate.prefix_cache import PrefixCache, seeded_batch
from clap.integrity import attach

torch = lazy.module("torch")
transformers = lazy.module("transformers")
kv_cache = lazy.module("clap.evaluate.kv_cache")  # extends transformers' DynamicCache


def json_end(text: str) -> int | None:
    """Index just past the first balanced top-level JSON object, or None while it is still open."""
    start = text.find("{")
    return None if start < 0 else object_end(text, start)


def truncate_at_json_end(text: str) -> str:
    end = json_end(text)
    return text if end is None else text[:end]


class StopOnJsonEnd:
    """Per-row stop once the generated text holds a closed JSON object (transformers' stopping-criteria protocol:
    called with the ids so far, it answers a bool per row)."""

    def __init__(self, tokenizer, prompt_len: int):
        self.tok, self.prompt_len = tokenizer, prompt_len

    def __call__(self, input_ids, scores, **kwargs):
        texts = self.tok.batch_decode(input_ids[:, self.prompt_len:], skip_special_tokens=True)
        return torch.tensor([json_end(t) is not None for t in texts], device=input_ids.device)


class StopRows:
    """Per-row stop for `generate`: row r of the batch ends once `stop_rows(idx[r])` says its answer is not wanted."""

    def __init__(self, idx: list[int], stop_rows: Callable[[int], bool]):
        self.idx, self.stop_rows = idx, stop_rows

    def __call__(self, input_ids, scores, **kwargs):
        return torch.tensor([bool(self.stop_rows(i)) for i in self.idx], device=input_ids.device)


@dataclass
class Generation:
    text: str
    new_tokens: int
    latency_ms: float
    reused: bool = False  # taken from the answer store (`clap.evaluate.answer_store`), not decoded in this run


class MetricNarrowing:
    """One answer's grammar, narrowed once its metric is written: `matcher(tokens)` returns a new matcher, already
    past `tokens`, under the answer schema narrowed to the quotes that name that metric
    (`decoding.naming_alternatives`), or None while the metric is open and whenever the grammar stands. Asked after
    every accepted chunk until the metric closes; then done. The head (entity, metric, period) is written under the
    same grammar either way, so the narrowed grammar accepts every token so far."""

    def __init__(self, schema: dict, grammars: GrammarCache, text_of: Callable[[list[int]], str]):
        self.schema, self.grammars, self.text_of = schema, grammars, text_of
        self.done = False

    def matcher(self, tokens: list[int]):
        if self.done:
            return None
        metric = written_metric(self.text_of(tokens))
        if metric is None:
            return None
        self.done = True
        narrowed = naming_alternatives(self.schema, metric)
        if narrowed is None:
            return None
        import xgrammar as xgr

        matcher = xgr.GrammarMatcher(self.grammars.compiled(narrowed))
        return matcher if all(matcher.accept_token(t) for t in tokens) else None


class Engine:
    """`Engine(base_dir, adapter_dir, expected, prod_dir, prod_expected)`;
    `engine.generate(msgs, use_adapter=True | False | "prod")`.

    Adapters are attached only through `serving.attach` against the manifests pinned in git
    (`serving.pinned_expectation`): there is no unchecked load path. The candidate and the adapter in
    prod share one base model in memory; the base answers with the adapters switched off.
    """

    def __init__(self, base_dir: Path, adapter_dir: Path | None = None, expected: dict | None = None,
                 prod_dir: Path | None = None, prod_expected: dict | None = None,
                 others: list[tuple[str, Path, dict]] = (), chat_template: str | None = None,
                 tools: list[dict] | None = None, answer_store: Path | None = None, dtype: str | None = None,
                 jump_forward: bool = False, reuse_prefixes: int = 0, merge_adapters: bool = False,
                 as_turns=None, evidence_names_metric: bool = False):
        """`others`: more (name, adapter folder, pinned manifest) to hold beside them — the decision
        evaluation serves every step of the chain from one base model. `chat_template` and `tools`
        render every conversation (the agent track's tool-calling template, `clap.agent.chat`).
        `answer_store`: a folder of greedy answers reused by content address (`clap.evaluate.answer_store`).
        `dtype`: `generate.dtype` (auto | float32 | bfloat16, `model.inference_dtype`); None keeps fp32 on CPU.
        `jump_forward`: `generate.jump_forward`, text the grammar forces appended in one pass (`decode_under_grammar`).
        `reuse_prefixes`: tokens of KV kept to reuse when a later prompt starts with what the model already read
        (`clap.evaluate.prefix_cache`; the agent's multi-turn episodes); 0 prefills every prompt whole.
        `merge_adapters`: `generate.merge_adapters`, each adapter answers with its LoRA folded into a copy of the
        weights it targets (`clap.evaluate.merged_lora`), not computed beside them. `as_turns`: a function that
        rewrites each conversation before the tokenizer's own template renders it (the agent track on a base with
        its own template, `clap.agent.chat.engine_rendering`). `evidence_names_metric`: `generate.evidence_names_metric`,
        an extractive answer's evidence names the metric it wrote when a quote does (`MetricNarrowing`)."""
        self.tok = base_model.load_tokenizer(base_dir)
        self.tok.padding_side = "left"
        self.chat_kwargs = {"chat_template": chat_template, "tools": tools} if chat_template else {}
        self.as_turns = as_turns or (lambda messages: messages)
        self.model = base_model.load_model(base_dir, dtype=None if dtype is None else base_model.inference_dtype(dtype))
        self.precision = str(next(self.model.parameters()).dtype).removeprefix("torch.")
        self.jump_forward = jump_forward
        self.evidence_names_metric = evidence_names_metric
        self.prefixes = PrefixCache(reuse_prefixes) if reuse_prefixes else None
        ident = base_model.identity(base_dir)
        self.adapters = []
        self.store = AnswerStore(answer_store) if answer_store is not None else None
        self._model_ids = {None: model_id(ident["weights_sha256"])}  # what answers, by content: the store's key
        for name, folder, pinned in (("candidate", adapter_dir, expected), ("prod", prod_dir, prod_expected), *others):
            if folder is not None:
                self.model = attach(self.model, name, Path(folder), pinned, ident)
                self.adapters.append(name)
                self._model_ids[name] = model_id(ident["weights_sha256"], pinned["files"])
        self.has_adapter = "candidate" in self.adapters
        self.model.eval()
        self._merged = MergedAdapters(self.model) if merge_adapters and self.adapters else None
        self.device = next(self.model.parameters()).device
        self._grammars = None

    @property
    def grammars(self):
        """xgrammar compiler for this tokenizer, built on first constrained call."""
        if self._grammars is None:
            self._grammars = GrammarCache(self.tok, self.model.config.vocab_size)
        return self._grammars

    def same_adapter(self, a: str, b: str) -> bool:
        """Whether adapters `a` and `b` load the same pinned files: the same content id in the store's key."""
        return a in self.adapters and b in self.adapters and self._model_ids[a] == self._model_ids[b]

    def decoding_id(self, use_adapter: bool | str, scoring: bool = False) -> str:
        """What besides the model and the request decides an answer (part of the answer store's keys): the precision,
        an adapter merged or not (other rounding), jump-forward (forced text in xgrammar's tokens; not in a score), the
        evidence narrowed to the written metric (another quote; not in a score)."""
        merged = self._merged is not None and self._name(use_adapter) is not None
        return (self.precision + ("+merged" if merged else "")
                + ("+jump-forward" if self.jump_forward and not scoring else "")
                + ("+evidence-names-metric" if self.evidence_names_metric and not scoring else ""))

    def narrowing(self, schema: dict | None) -> MetricNarrowing | None:
        """The narrowing a request under `schema` decodes with (None: its grammar stays as compiled)."""
        if not self.evidence_names_metric or not narrowable(schema):
            return None
        return MetricNarrowing(schema, self.grammars, lambda tokens: self.tok.decode(tokens, skip_special_tokens=True))

    @staticmethod
    def _name(use_adapter: bool | str) -> str | None:
        return "candidate" if use_adapter is True else (use_adapter or None)

    def adapter_context(self, use_adapter: bool | str):
        """The model answering as `use_adapter` (an adapter's name, True for the candidate, False for the base) for
        the `with` block: a decoding loop outside `generate` (`clap.evaluate.continuous`) runs inside it."""
        return self._context(use_adapter)

    def _context(self, use_adapter: bool | str):
        name = self._name(use_adapter)
        if not name:
            return self.model.disable_adapter() if self.adapters else contextlib.nullcontext()
        if name not in self.adapters:
            raise ValueError(f"no {name} adapter loaded" if name != "candidate" else "no adapter loaded")
        if self._merged is not None:
            return self._merged.active(name)
        self.model.set_adapter(name)
        return contextlib.nullcontext()

    @lazy.inference_mode
    def completion_logprobs(self, conversations: list[list[dict]], completions: list[str],
                            use_adapter: bool | str) -> list[float]:
        """Summed log-probability of each assistant `completion` after its conversation's prompt — how
        much the policy prefers an answer (the ranking of chosen over near-miss over rejected). Read from
        the answer store when this model scored these tokens before (round after round the base model and
        prod score the same held-out cases); the head runs on the completion's positions only."""
        model_key = self._model_ids.get(self._name(use_adapter))
        causal_lm = causal_lm_of(self.model)
        out = []
        with self._context(use_adapter):
            for conv, completion in zip(conversations, completions):
                prompt = self.encode(conv)
                full = self.tok.apply_chat_template(self.as_turns(conv + [{"role": "assistant", "content": completion}]),
                                                    tokenize=True, return_dict=True, **self.chat_kwargs)["input_ids"]
                if full[:len(prompt)] != prompt:
                    raise ValueError("the chat template does not extend the prompt with the answer")
                key = self.store.logprob_key(model_key, full, len(prompt), self.decoding_id(use_adapter, scoring=True)) \
                    if self.store is not None and model_key is not None else None
                stored = self.store.get_logprob(key) if key else None
                if stored is not None:
                    out.append(stored)
                    continue
                ids = torch.tensor([full], device=self.device)
                hidden = causal_lm.model(input_ids=ids).last_hidden_state[0, len(prompt) - 1:-1]
                logp = torch.log_softmax(causal_lm.lm_head(hidden.contiguous()).float(), dim=-1)
                value = float(logp.gather(1, ids[0, len(prompt):, None]).sum())
                if key:
                    self.store.put(key, {"logprob": value})
                out.append(value)
        return out

    def encode(self, messages: list[dict] | str) -> list[int]:
        """The prompt's tokens: a conversation through the chat template, a plain string (a text completion) as is."""
        if isinstance(messages, str):
            return self.tok(messages)["input_ids"]
        return self.tok.apply_chat_template(self.as_turns(messages), add_generation_prompt=True, tokenize=True,
                                            return_dict=True, **self.chat_kwargs)["input_ids"]

    @lazy.inference_mode
    def generate(self, conversations: list[list[dict]], use_adapter: bool | str, max_new_tokens: int = 96,
                 batch_size: int = 8, progress: bool = True, schemas: list[dict] | None = None,
                 temperature: float = 0.0, seed: int | None = None, top_p: float | None = None,
                 use_store: bool = True,
                 on_tokens: Callable[[int, list[int]], None] | None = None,
                 stop_rows: Callable[[int], bool] | None = None) -> list[Generation]:
        """Greedy answers, one per conversation; with `schemas` (one JSON schema per conversation,
        `decoding.answer_schema`) each row decodes under its grammar, as xgrammar does in serving.
        `temperature` > 0 samples instead (the agent's pass^k runs and mined draws): under a grammar through the
        same loop as greedy answers (`Sampling`: the model's top-k / top-p, as `generate` samples), without one
        through `generate(do_sample=True)`. Draws come from torch's global RNG, or with `seed` (under a grammar)
        from a generator per request seeded by `seed` and its prompt (`request_generator`, vLLM's per-request
        seed): a draw then depends on neither the batch nor the order it ran in, and is stored and read back
        like a greedy answer. `top_p`: the nucleus instead of the model's own (an OpenAI request's). `use_store=False` decodes afresh and stores nothing (the paired latency timing).
        `on_tokens(i, token_ids)`: called from the decoding loop as conversation i's new tokens are picked (a
        server streams them), never for an answer read from the store. `stop_rows(i)`: True once conversation i's
        answer is no longer wanted (`clap serve`: its client went away); it leaves the batch at the next step, its
        answer cut where it stood."""
        if schemas is not None and len(schemas) != len(conversations):
            raise ValueError(f"{len(schemas)} schemas for {len(conversations)} conversations")
        if seed is not None and (temperature == 0 or schemas is None):
            raise ValueError("a per-request seed needs sampling (temperature > 0) under a grammar (schemas)")
        sampling = Sampling.of(self.model, temperature, seed, top_p) if temperature > 0 else None
        encoded = [self.encode(m) for m in conversations]
        out: list[Generation | None] = [None] * len(encoded)
        keys = (self._store_keys(encoded, use_adapter, schemas, max_new_tokens, sampling)
                if use_store and (temperature == 0 or seed is not None) else None)
        if keys:
            for i, key in enumerate(keys):
                hit = self.store.get(key)
                if hit is not None:
                    out[i] = Generation(hit["text"], hit["new_tokens"], hit["latency_ms"], reused=True)
        order = sorted((i for i in range(len(encoded)) if out[i] is None), key=lambda i: len(encoded[i]))
        bar = _progress(len(order), progress)
        started = time.perf_counter()
        with self._context(use_adapter):
            for s in range(0, len(order), batch_size):
                idx = order[s:s + batch_size]
                t0 = time.perf_counter()
                rows = self._decode_batch(idx, encoded, schemas, use_adapter, max_new_tokens, sampling, temperature,
                                          on_tokens, stop_rows)
                ms = (time.perf_counter() - t0) * 1000
                for row, i in enumerate(idx):
                    text = truncate_at_json_end(self.tok.decode(rows[row], skip_special_tokens=True))
                    out[i] = Generation(text=text, new_tokens=len(rows[row]), latency_ms=ms)
                    if keys:
                        self.store.put(keys[i], {"text": text, "new_tokens": len(rows[row]), "latency_ms": round(ms, 2)})
                if bar:
                    done = min(s + batch_size, len(order))
                    bar.update(len(idx))
                    bar.set_postfix(samples_s=f"{done / (time.perf_counter() - started):.2f}")
        if bar:
            bar.close()
        return out  # type: ignore[return-value]

    def _decode_batch(self, idx: list[int], encoded: list[list[int]], schemas: list[dict] | None,
                      use_adapter: bool | str, max_new_tokens: int, sampling: Sampling | None, temperature: float,
                      on_tokens: Callable[[int, list[int]], None] | None,
                      stop_rows: Callable[[int], bool] | None = None) -> list[list[int]]:
        """The new token ids of conversations `idx`, decoded together: under their grammars in the engine's own
        loop, or without schemas through `generate` (stopping at the JSON object's end, or where `stop_rows` says)."""
        pad = self.tok.pad_token_id
        ids, mask = left_padded([encoded[i] for i in idx], pad, self.device)
        width = ids.shape[1]
        if schemas is not None:
            return self._under_grammar([encoded[i] for i in idx], ids, mask, use_adapter,
                                       [self.grammars.compiled(schemas[i]) for i in idx], max_new_tokens,
                                       sampling, None if on_tokens is None else
                                       (lambda row, toks: on_tokens(idx[row], toks)),
                                       None if stop_rows is None else (lambda row: stop_rows(idx[row])),
                                       [self.narrowing(schemas[i]) for i in idx])
        gen = self.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                                  **({"do_sample": True, "temperature": temperature, "top_p": sampling.top_p}
                                     if sampling is not None else {"do_sample": False}), use_cache=True,
                                  pad_token_id=pad,
                                  stopping_criteria=transformers.StoppingCriteriaList(
                                      [StopOnJsonEnd(self.tok, width)]
                                      + ([] if stop_rows is None else [StopRows(idx, stop_rows)])),
                                  streamer=None if on_tokens is None else RowStreamer(idx, pad, on_tokens))
        return [[t for t in gen[row, width:].tolist() if t != pad] for row in range(len(idx))]

    def _under_grammar(self, prompts: list[list[int]], ids: torch.Tensor, mask: torch.Tensor, use_adapter: bool | str,
                       compiled: list, max_new_tokens: int, sampling: Sampling | None,
                       on_tokens: Callable[[int, list[int]], None] | None = None,
                       stop: Callable[[int], bool] | None = None,
                       narrowings: list[MetricNarrowing | None] | None = None) -> list[list[int]]:
        """One batch through `decode_under_grammar`; with the prefix cache on, each row prefills only what follows
        its longest cached prefix, and every row's KV is kept as it leaves."""
        model = self._model_ids.get(self._name(use_adapter))
        generators = ([request_generator(sampling.seed, p) for p in prompts]
                      if sampling is not None and sampling.seed is not None else None)
        if self.prefixes is None or model is None:
            return decode_under_grammar(self.model, ids, mask, compiled, max_new_tokens, self.jump_forward,
                                        sampling=sampling, generators=generators, on_tokens=on_tokens, stop=stop,
                                        narrowings=narrowings)
        reused = [self.prefixes.longest(model, p) for p in prompts]
        ids, mask, cache = seeded_batch(prompts, reused, self.tok.pad_token_id, max_new_tokens)

        def keep(row: int, fed: list[int], kv: list) -> None:
            self.prefixes.put(model, prompts[row] + fed, kv)

        return decode_under_grammar(self.model, ids.to(self.device), mask.to(self.device), compiled, max_new_tokens,
                                    self.jump_forward, cache=cache, on_leave=keep, sampling=sampling,
                                    generators=generators, on_tokens=on_tokens, stop=stop, narrowings=narrowings)

    def _store_keys(self, encoded: list[list[int]], use_adapter: bool | str, schemas: list[dict] | None,
                    max_new_tokens: int, sampling: Sampling | None = None) -> list[str] | None:
        model = self._model_ids.get(self._name(use_adapter))
        if self.store is None or model is None:  # an unknown adapter name: `_context` says which
            return None
        decoding = self.decoding_id(use_adapter) + ("" if sampling is None else f"+{sampling.key()}")
        return [self.store.key(model, ids, None if schemas is None else schemas[i], max_new_tokens, decoding)
                for i, ids in enumerate(encoded)]


class RowStreamer:
    """A `generate(streamer=…)` for a batch: hands each row's new token to `on_tokens(idx[row], [token])` as the
    loop picks it (transformers' own streamers take one row only); padding after a row finished is not a token."""

    def __init__(self, idx: list[int], pad_id: int, on_tokens: Callable[[int, list[int]], None]):
        self.idx, self.pad_id, self.on_tokens, self.prompt_seen = idx, pad_id, on_tokens, False

    def put(self, value: torch.Tensor) -> None:
        if not self.prompt_seen:  # the first call hands over the prompts
            self.prompt_seen = True
            return
        for row, token in enumerate(value.reshape(len(self.idx), -1)[:, -1].tolist()):
            if token != self.pad_id:
                self.on_tokens(self.idx[row], [token])

    def end(self) -> None:
        pass


def left_padded(prompts: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Token prompts as one left-padded batch: (input ids, attention mask)."""
    width = max(map(len, prompts))
    ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in prompts], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
    return ids, mask


def causal_lm_of(model):
    """The causal LM under a PEFT wrapper (its LoRA layers stay in place), to run the decoder and the head apart."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


@dataclass(frozen=True)
class Sampling:
    """Sampled decoding as `generate(do_sample=True)` does it after xgrammar's processor: the grammar's mask, then
    temperature, top-k, top-p, then a draw — from torch's global RNG (seed it for repeatable draws), or with `seed`
    from each request's own generator (`request_generator`)."""
    temperature: float
    top_k: int = 50  # transformers' defaults when the model's generation config sets none
    top_p: float = 1.0
    seed: int | None = None

    @classmethod
    def of(cls, model, temperature: float, seed: int | None = None, top_p: float | None = None) -> Sampling:
        """At `temperature`, with the top-k and top-p the model's generation config sets (as `generate` reads them);
        `top_p` replaces the config's (a request's own)."""
        config = getattr(model, "generation_config", None)
        top_k = getattr(config, "top_k", None)
        top_p = getattr(config, "top_p", None) if top_p is None else top_p
        return cls(temperature, cls.top_k if top_k is None else top_k, cls.top_p if top_p is None else top_p, seed)

    def key(self) -> str:
        """What decides a seeded draw beyond the model and the request: part of the answer store's key."""
        return f"sample(t={self.temperature},k={self.top_k},p={self.top_p},seed={self.seed})"


def request_generator(seed: int, prompt_ids: list[int]) -> torch.Generator:
    """A CPU generator seeded by `seed` and the request's prompt tokens: the same request with the same seed draws the
    same tokens in any batch, any order and any process; another seed or another prompt draws independently."""
    digest = hashlib.sha256(f"{seed}:{','.join(map(str, prompt_ids))}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))


def pick_tokens(logits: torch.Tensor, sampling: Sampling | None,
                generators: list[torch.Generator] | None = None) -> list[int]:
    """One token per row of `logits` ([rows, vocab], the grammar's mask applied: -inf where it forbids): the argmax,
    or with `sampling` a draw from `sampling_scores` — from torch's global RNG, or row r's from `generators[r]`."""
    if sampling is None:
        return logits.argmax(-1).tolist()
    probs = sampling_scores(logits, sampling).softmax(-1)
    if generators is None:
        return torch.multinomial(probs, 1).squeeze(1).tolist()
    return [int(torch.multinomial(row.cpu(), 1, generator=g)) for row, g in zip(probs, generators)]


def sampling_scores(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """The temperature-scaled logits cut to their top-k, then to their top-p nucleus (-inf outside): transformers'
    `TemperatureLogitsWarper`, `TopKLogitsWarper` and `TopPLogitsWarper` in `generate`'s order, the most likely
    token always kept."""
    scores = logits / sampling.temperature
    if 0 < sampling.top_k < scores.shape[-1]:
        kth = torch.topk(scores, sampling.top_k, dim=-1).values[:, -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if sampling.top_p < 1.0:
        ascending, order = torch.sort(scores, dim=-1)
        drop = ascending.softmax(-1).cumsum(-1) <= 1 - sampling.top_p
        drop[:, -1] = False
        scores = scores.masked_fill(drop.scatter(1, order, drop), float("-inf"))
    return scores


def sample_under_grammar(model, prompts: list[list[int]], compiled: list, max_new_tokens: int, temperature: float,
                         pad_id: int) -> list[tuple[list[int], bool]]:
    """Sampled completions of token prompts, each under its compiled grammar, through `decode_under_grammar`: the
    GRPO rollouts' policy (TRL's `rollout_func` hands over prompts, and the policy is the model in training).
    Per prompt: its new tokens, and whether it closed (grammar completed, or a stop token drawn) before
    `max_new_tokens` — one that did not was cut there, as `generate` cuts it."""
    ids, mask = left_padded(prompts, pad_id, next(model.parameters()).device)
    rows = decode_under_grammar(model, ids, mask, compiled, max_new_tokens, sampling=Sampling.of(model, temperature))
    return [(row, len(row) < max_new_tokens) for row in rows]


@lazy.inference_mode
def decode_under_grammar(model, ids: torch.Tensor, mask: torch.Tensor, compiled: list,
                         max_new_tokens: int, jump_forward: bool = False, cache=None,
                         on_leave: Callable[[int, list[int], list], None] | None = None,
                         sampling: Sampling | None = None,
                         generators: list[torch.Generator] | None = None,
                         on_tokens: Callable[[int, list[int]], None] | None = None,
                         stop: Callable[[int], bool] | None = None,
                         narrowings: list[MetricNarrowing | None] | None = None) -> list[list[int]]:
    """Greedy (or, with `sampling`, sampled) decoding of a left-padded batch, each row under its compiled xgrammar
    grammar; returns each row's new token ids. A row leaves the batch and the KV cache when its grammar completes or
    at `max_new_tokens`; token by token this equals `generate` with xgrammar's logits processor (tested).
    `jump_forward`: the tokens the grammar forces after a pick are fed in the same pass (padded on the left inside the
    chunk), in xgrammar's tokenisation, so answers can change (`generate.jump_forward`). `cache`: the KV of a reused
    prefix (`PrefixCache`; `mask` covers it too). `on_leave(row, fed_new_tokens, kv)`: as each row leaves, with its KV
    (padding dropped). `generators`: one per row. `on_tokens(row, tokens)`: accepted tokens as they come (streaming).
    `stop(row)`: True when a row is no longer wanted; it leaves the batch at that step, as a completed row does.
    `narrowings`: one `MetricNarrowing` (or None) per row; a row's matcher is replaced by the one it returns."""
    import xgrammar as xgr

    matchers = [xgr.GrammarMatcher(c) for c in compiled]
    stop_ids = set(matchers[0].stop_token_ids)
    bitmask = xgr.allocate_token_bitmask(len(matchers), compiled[0].tokenizer_info.vocab_size)
    new_tokens: list[list[int]] = [[] for _ in matchers]
    active = list(range(len(matchers)))  # batch rows still decoding, in the cache's row order
    cache = kv_cache.GrowingCache(model.config.num_hidden_layers, reserve=max_new_tokens) if cache is None else cache
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    step_ids = ids
    # decoder and head apart: the head on each row's last position only (the causal LM's `logits_to_keep=1` hands a
    # multi-token step's strided slice to a batched matmul over a copied [batch, hidden, vocab] weight: ~1 s a step)
    causal_lm = causal_lm_of(model)
    while active:
        hidden = causal_lm.model(input_ids=step_ids, attention_mask=mask, position_ids=positions[:, -step_ids.shape[1]:],
                                 cache=cache, use_cache=True).last_hidden_state
        logits = causal_lm.lm_head(hidden[:, -1, :].contiguous()).float()
        for r, i in enumerate(active):
            matchers[i].fill_next_token_bitmask(bitmask, r)
        xgr.apply_token_bitmask_inplace(logits, bitmask[:len(active)].to(logits.device))
        picked = pick_tokens(logits, sampling, None if generators is None else [generators[i] for i in active])
        chunks, keep, fed = [], [], [len(new_tokens[i]) for i in active]  # every token so far went through the model
        for r, i in enumerate(active):
            if stop is not None and stop(i):
                continue
            matcher = matchers[i]
            chunk = accepted_chunk(matcher, picked[r], stop_ids, jump_forward, max_new_tokens - len(new_tokens[i]))
            if chunk is None:
                continue
            new_tokens[i].extend(chunk)
            if on_tokens is not None:
                on_tokens(i, chunk)
            if narrowings is not None and narrowings[i] is not None:
                matcher = matchers[i] = narrowings[i].matcher(new_tokens[i]) or matcher
            if matcher.is_completed() or matcher.is_terminated() or len(new_tokens[i]) >= max_new_tokens:
                continue
            chunks.append(chunk)
            keep.append(r)
        if on_leave is not None:
            _leaving(on_leave, active, keep, mask, new_tokens, fed, cache)
        if not keep:
            break
        if len(keep) < len(active):
            cache.batch_select_indices(torch.tensor(keep, device=ids.device))
            mask, positions = mask[keep], positions[keep]
        active = [active[r] for r in keep]
        step_ids, mask, positions = next_step_inputs(chunks, mask, positions)
    return new_tokens


def _leaving(on_leave, active: list[int], keep: list[int], mask: torch.Tensor, new_tokens: list[list[int]],
             fed: list[int], cache) -> None:
    """`on_leave(row, fed_new_tokens, kv)` for each row leaving the batch this step, with its KV (padding dropped)."""
    for r in sorted(set(range(len(active))) - set(keep)):
        seen = mask[r].bool()
        on_leave(active[r], new_tokens[active[r]][:fed[r]],
                 [(layer.keys[r][:, seen], layer.values[r][:, seen]) for layer in cache.layers])


def accepted_chunk(matcher, token: int, stop_ids: set[int], jump_forward: bool, room: int) -> list[int] | None:
    """What a row takes this step: the picked token and, with `jump_forward`, the tokens its grammar forces after
    it, at most `room` of them; None when the pick ends the row (a stop token, or one the grammar refuses)."""
    if token in stop_ids or not matcher.accept_token(token):
        return None
    chunk = [token]
    for forced in matcher.find_jump_forward_tokens() if jump_forward else ():
        if not matcher.accept_token(forced):
            break
        chunk.append(forced)
    return chunk[:room]


def next_step_inputs(chunks: list[list[int]], mask: torch.Tensor, positions: torch.Tensor):
    """The next pass's input: each row's chunk left-padded to the longest inside the chunk (the padding masked, so
    every row keeps its own positions), and the mask and positions grown by it."""
    width = max(len(c) for c in chunks)
    step_ids = torch.tensor([[c[0]] * (width - len(c)) + c for c in chunks], device=mask.device)
    step_mask = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in chunks], device=mask.device)
    return (step_ids, torch.cat([mask, step_mask], dim=1),
            torch.cat([positions, positions[:, -1:] + step_mask.cumsum(-1)], dim=1))


def _progress(total: int, enabled: bool):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="generate", unit="sample")


def plain_generate_loop(model, tok, conversations: list[list[dict]], max_new_tokens: int,
                        schemas: list[dict] | None = None, grammars=None) -> list[str]:
    """The reference: one `generate` call per prompt, no batching (what benchmarks compare against);
    with `schemas`, each prompt under its grammar through xgrammar's processor (`grammars`: a
    `decoding.GrammarCache`)."""
    outs = []
    with torch.inference_mode():
        for i, m in enumerate(conversations):
            enc = tok.apply_chat_template(m, add_generation_prompt=True, return_tensors="pt", return_dict=True)
            enc = {k: v.to(model.device) for k, v in enc.items()}
            constrain = [grammars.processor([schemas[i]])] if schemas is not None else []
            g = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                               pad_token_id=tok.pad_token_id, logits_processor=transformers.LogitsProcessorList(constrain))
            outs.append(truncate_at_json_end(tok.decode(g[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)))
    return outs
