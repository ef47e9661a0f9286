"""Continuous batching: rows decode together step by step, and a new row joins the running batch at the next step
instead of waiting for the batch to finish (vLLM's scheduling, on this engine's own loop).

    batch = RunningBatch(engine.model, pad_id, eos_ids, jump_forward=False)
    batch.admit([Row(prompt_ids, max_new_tokens, matcher=…)])   # prefilled alone, then merged into the cache
    while batch.rows:
        batch.step()                                            # one token (or a forced chunk) for every row

Each row keeps what `decode_under_grammar` keeps for a batch — its grammar matcher (or none: free text, which stops
at the end of its first JSON object as `Engine.generate` does), its sampling, its tokens — and the batch one KV cache.
`admit` prefills the joining rows as a batch of their own, picks their first tokens, then merges both caches:
each side left-padded on the token axis to the longer, the padding masked, every token at its own position. Rows
leave when their grammar completes, a stop token is picked, their token limit is reached, or `Row.cancelled()`
says so. Greedy answers equal those of `Engine.generate` for the same prompts (tested).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from clap import lazy
from clap.evaluate.generate import (
    Sampling,
    accepted_chunk,
    causal_lm_of,
    json_end,
    left_padded,
    next_step_inputs,
    pick_tokens,
)

torch = lazy.module("torch")
kv_cache = lazy.module("clap.evaluate.kv_cache")  # extends transformers' DynamicCache


@dataclass(eq=False)  # a row is itself: two requests with the same prompt are two rows
class Row:
    """One request in the running batch."""

    prompt: list[int]
    max_new_tokens: int
    matcher: object | None = None  # an xgrammar GrammarMatcher; None: free text
    sampling: Sampling | None = None  # None: greedy
    generator: torch.Generator | None = None  # a seeded request's own draws
    on_tokens: Callable[[list[int]], None] | None = None  # accepted tokens as they come (streaming)
    cancelled: Callable[[], bool] = lambda: False
    on_done: Callable[[Row], None] | None = None  # called once, when the row leaves
    on_fail: Callable[[Exception], None] | None = None  # the batch failed: the row's request learns why
    tokens: list[int] = field(default_factory=list)
    text_of: Callable[[list[int]], str] | None = None  # free rows: their text so far (the JSON-end stop)
    pending: list[int] = field(default_factory=list)  # picked, not yet fed through the model
    stop_ids: set[int] | None = None  # a grammar row's stop tokens (its matcher's), read once
    narrowing: object | None = None  # a generate.MetricNarrowing: the matcher it returns replaces the row's


class RunningBatch:
    def __init__(self, model, pad_id: int, stop_ids: set[int], jump_forward: bool = False, vocab_size: int = 0):
        """`stop_ids`: the tokens that end a free row (the model's end of turn); a grammar row ends at its
        matcher's stop tokens. `vocab_size`: the grammars' vocabulary (their bitmask's width)."""
        self.model, self.pad_id, self.stop_ids, self.jump_forward = model, pad_id, stop_ids, jump_forward
        self.vocab_size = vocab_size
        self.rows: list[Row] = []
        self.cache: kv_cache.GrowingCache | None = None
        self.mask = self.positions = None
        self.steps = 0

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache) -> torch.Tensor:
        """The last position's logits of every row (the head on that position only)."""
        causal_lm = causal_lm_of(self.model)
        hidden = causal_lm.model(input_ids=ids, attention_mask=mask, position_ids=positions[:, -ids.shape[1]:],
                                 cache=cache, use_cache=True).last_hidden_state
        return causal_lm.lm_head(hidden[:, -1, :].contiguous()).float()

    def _pick(self, rows: list[Row], logits: torch.Tensor) -> list[list[int] | None]:
        """Each row's chunk this step (its pick, and with jump-forward what its grammar forces), or None: it ends."""
        import xgrammar as xgr

        constrained = [r for r, row in enumerate(rows) if row.matcher is not None]
        if constrained:
            bitmask = xgr.allocate_token_bitmask(len(rows), self.vocab_size or logits.shape[-1])
            bitmask.fill_(-1)  # every token allowed for a free row
            for r in constrained:
                rows[r].matcher.fill_next_token_bitmask(bitmask, r)
            xgr.apply_token_bitmask_inplace(logits, bitmask.to(logits.device))
        greedy = logits.argmax(-1).tolist()  # one pass for every greedy row
        chunks = []
        for r, row in enumerate(rows):
            token = greedy[r] if row.sampling is None else pick_tokens(
                logits[r:r + 1], row.sampling, None if row.generator is None else [row.generator])[0]
            room = row.max_new_tokens - len(row.tokens)
            if row.matcher is not None:
                if row.stop_ids is None:
                    row.stop_ids = set(row.matcher.stop_token_ids)
                chunks.append(accepted_chunk(row.matcher, token, row.stop_ids, self.jump_forward, room))
            else:
                chunks.append(None if token in self.stop_ids else [token])
        return chunks

    def _take(self, rows: list[Row], chunks: list[list[int] | None]) -> list[int]:
        """Record each row's chunk; the indices of the rows that go on."""
        keep = []
        for r, (row, chunk) in enumerate(zip(rows, chunks)):
            if chunk is None or row.cancelled():
                continue
            row.tokens.extend(chunk)
            if row.on_tokens is not None:
                row.on_tokens(chunk)
            if row.narrowing is not None:
                row.matcher = row.narrowing.matcher(row.tokens) or row.matcher
            ended = (len(row.tokens) >= row.max_new_tokens
                     or (row.matcher is not None and (row.matcher.is_completed() or row.matcher.is_terminated()))
                     or (row.matcher is None and row.text_of is not None
                         and json_end(row.text_of(row.tokens)) is not None))
            if not ended:
                row.pending = chunk
                keep.append(r)
        for r, row in enumerate(rows):
            if r not in keep and row.on_done is not None:
                row.on_done(row)
        return keep

    @lazy.inference_mode
    def admit(self, rows: list[Row]) -> None:
        """Prefill `rows`, pick their first chunks, and merge them into the running batch."""
        device = next(self.model.parameters()).device
        ids, mask = left_padded([r.prompt for r in rows], self.pad_id, device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = kv_cache.GrowingCache(self.model.config.num_hidden_layers,
                             reserve=max(r.max_new_tokens for r in rows) + 8)
        logits = self._forward(ids, mask, positions, cache)
        keep = self._take(rows, self._pick(rows, logits))
        if not keep:
            return
        rows = [rows[r] for r in keep]
        if len(keep) < ids.shape[0]:
            index = torch.tensor(keep, device=device)
            cache.batch_select_indices(index)
            mask, positions = mask[index], positions[index]
        if not self.rows:
            self.rows, self.cache, self.mask, self.positions = rows, cache, mask, positions
            return
        self.cache, self.mask, self.positions = _merged(self.cache, self.mask, self.positions, cache, mask, positions,
                                                        max(r.max_new_tokens for r in self.rows + rows) + 8)
        self.rows = self.rows + rows

    @lazy.inference_mode
    def step(self) -> None:
        """One pass: every row's pending chunk through the model, then its next chunk picked."""
        rows = self.rows
        gone = [r for r, row in enumerate(rows) if row.cancelled()]
        if gone:
            for r in gone:
                if rows[r].on_done is not None:
                    rows[r].on_done(rows[r])
            self._select([r for r in range(len(rows)) if r not in gone])
            rows = self.rows
            if not rows:
                return
        step_ids, self.mask, self.positions = next_step_inputs([row.pending for row in rows], self.mask, self.positions)
        logits = self._forward(step_ids, self.mask, self.positions, self.cache)
        self.steps += 1
        self._select(self._take(rows, self._pick(rows, logits)))

    def fail(self, exc: Exception) -> None:
        """Every row's request learns why the batch failed; the batch is empty again."""
        for row in self.rows:
            if row.on_fail is not None:
                row.on_fail(exc)
        self.rows, self.cache, self.mask, self.positions = [], None, None, None

    def _select(self, keep: list[int]) -> None:
        if len(keep) == len(self.rows):
            return
        self.rows = [self.rows[r] for r in keep]
        if not keep:
            self.cache = self.mask = self.positions = None
            return
        index = torch.tensor(keep, device=self.mask.device)
        self.cache.batch_select_indices(index)
        self.mask, self.positions = self.mask[index], self.positions[index]


def _merged(cache_a, mask_a, positions_a, cache_b, mask_b, positions_b, reserve: int):
    """One cache (and mask, positions) holding the rows of both, each side left-padded to the longer."""
    width = max(mask_a.shape[1], mask_b.shape[1])

    def pad(t: torch.Tensor, axis_from_end: int) -> torch.Tensor:
        missing = width - t.shape[-axis_from_end]
        if missing == 0:
            return t
        spec = [0, 0] * (axis_from_end - 1) + [missing, 0]
        return torch.nn.functional.pad(t, spec)

    merged = kv_cache.GrowingCache(len(cache_a.layers), reserve=reserve)
    for i, (la, lb) in enumerate(zip(cache_a.layers, cache_b.layers)):
        keys = torch.cat([pad(la.keys, 2), pad(lb.keys, 2)])
        values = torch.cat([pad(la.values, 2), pad(lb.values, 2)])
        merged.update(keys, values, i)
    return (merged, torch.cat([pad(mask_a, 1), pad(mask_b, 1)]),
            torch.cat([pad(positions_a, 1), pad(positions_b, 1)]))
