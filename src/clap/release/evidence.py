"""What the gate may read: every evidence record checked before a single rule runs.

A rule that compares a NaN, an inf, a null or a string with its threshold fails the comparison and so
"passes" — the one way a gate can promote on evidence it never had. `problems(...)` walks each record the
gate reads and names every value that is not a finite number with its n, as
(file, field, what is wrong); the gate turns each into an `evidence_invalid` reason with outcome `hold`
and runs no rule on that evidence.

Shapes checked (the records `evaluate`, `replay`, `evaluate_decisions`, `evaluate_agent` and
`clap human import` write):
- a *delta* ({delta, ci_low, ci_high, n}): three finite numbers with ci_low ≤ delta ≤ ci_high, n ≥ 1;
- a *model's metrics* ({metric: number}): every value finite; siblings (baseline, candidate, prod; the
  replay arms; the decision models) carry the same metrics, so a field removed from one is named;
- a *delta table* ({metric: delta}): one delta per metric the models carry (latency and the
  unconstrained format check are measured apart), and sibling tables agree;
- counts (`n`, `n_cases`, `n_tasks`): integers ≥ 1; flags (`candidate_is_prod`, `constrained`): booleans.
"""

from __future__ import annotations

import math

from clap import paths

NOT_DELTAS = {"p50_latency_ms", "p95_latency_ms", "schema_valid_unconstrained"}  # measured, never paired per sample
CANDIDATE_ONLY = {"schema_valid_unconstrained"}  # the candidate's free-decoding format check
DELTA_KEYS = ("delta", "ci_low", "ci_high")
PROD_KEYS = ("deltas_vs_prod", "prod_vs_base", "candidate_is_prod", "prod")  # an evaluation with an adapter in prod


def finite(value) -> bool:
    """A real number the gate can compare: int or float (never bool), neither NaN nor ±inf."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _what(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if value != value else ("inf" if value > 0 else "-inf")
    if isinstance(value, bool):
        return "a boolean"
    return f"{type(value).__name__} {str(value)[:40]!r}"


class _Check:
    """Collects (file, field, problem) for one evidence file."""

    def __init__(self, file: str, out: list[tuple[str, str, str]]):
        self.file, self.out = file, out

    def bad(self, field: str, problem: str) -> None:
        self.out.append((self.file, field, problem))

    def record(self, obj, field: str = "") -> bool:
        if isinstance(obj, str) and not field:  # the reader's word on a file it could not read (stages/gate._evidence)
            self.bad("(file)", obj)
            return False
        if not isinstance(obj, dict):
            self.bad(field or "(file)", f"is {_what(obj)}, not a JSON object")
            return False
        return True

    def count(self, obj: dict, key: str, field: str, least: int = 1) -> None:
        v = obj.get(key, _MISSING)
        if v is _MISSING:
            self.bad(field, "is missing")
        elif not (isinstance(v, int) and not isinstance(v, bool) and v >= least):
            self.bad(field, f"is {_what(v)}, not a count ≥ {least}")

    def flag(self, obj: dict, key: str, field: str, required: bool) -> None:
        v = obj.get(key, _MISSING)
        if v is _MISSING:
            if required:
                self.bad(field, "is missing")
        elif not isinstance(v, bool):
            self.bad(field, f"is {_what(v)}, not true/false")

    def numbers(self, obj, field: str) -> set[str]:
        """A model's metrics: every value finite. Returns its keys."""
        if not self.record(obj, field):
            return set()
        for k, v in obj.items():
            if k == "n":
                self.count(obj, "n", f"{field}.n")
            elif isinstance(v, (dict, list)):  # a breakdown (by kind, pass^k): no NaN or inf anywhere inside
                self.no_non_finite(v, f"{field}.{k}")
            elif not finite(v):
                self.bad(f"{field}.{k}", f"is {_what(v)}, not a finite number")
        return set(obj) - {"n"}

    def no_non_finite(self, obj, field: str) -> None:
        items = obj.items() if isinstance(obj, dict) else enumerate(obj)
        for k, v in items:
            if isinstance(v, (dict, list)):
                self.no_non_finite(v, f"{field}.{k}")
            elif isinstance(v, float) and not math.isfinite(v):
                self.bad(f"{field}.{k}", f"is {_what(v)}")

    def delta(self, obj, field: str) -> None:
        if not self.record(obj, field):
            return
        for k in DELTA_KEYS:
            if k not in obj:
                self.bad(f"{field}.{k}", "is missing")
            elif not finite(obj[k]):
                self.bad(f"{field}.{k}", f"is {_what(obj[k])}, not a finite number")
        self.count(obj, "n", f"{field}.n")
        if all(finite(obj.get(k)) for k in DELTA_KEYS) and not obj["ci_low"] <= obj["delta"] <= obj["ci_high"]:
            self.bad(field, f"interval [{obj['ci_low']}, {obj['ci_high']}] does not hold its point {obj['delta']}")

    def deltas(self, obj, field: str, metrics: set[str] | None) -> set[str]:
        """A delta table: one delta per metric (`metrics`, when the models' metrics are known)."""
        if not self.record(obj, field):
            return set()
        for k, d in obj.items():
            self.delta(d, f"{field}.{k}")
        for k in sorted((metrics or set()) - set(obj)):
            self.bad(f"{field}.{k}", "is missing (the models carry it)")
        return set(obj)

    def carry(self, keys: dict[str, set[str]], tables: list[set[str]], field: str) -> None:
        """Every model carries each metric its delta tables compare."""
        compared = set().union(set(), *tables)
        for name, have in keys.items():
            for k in sorted(compared - have):
                self.bad(f"{field}{name}.{k}", "is missing (a delta table compares it)")

    def siblings(self, keysets: dict[str, set[str]], field: str, optional: set[str] = frozenset()) -> None:
        """Sibling tables carry the same keys: a field removed from one of them is named."""
        union = set().union(*keysets.values()) if keysets else set()
        for name, keys in keysets.items():
            for k in sorted(union - keys - optional):
                self.bad(f"{field}{name}.{k}", "is missing (its siblings carry it)")


_MISSING = object()


def evaluation_problems(batch: str, rec, out: list) -> None:
    """metrics/eval/<batch>.json: baseline, candidate (and prod) metrics, their delta tables, n."""
    c = _Check(str(paths.eval_metrics(batch)), out)
    if not c.record(rec):
        return
    c.count(rec, "n", "n")
    if rec.get("batch", _MISSING) != batch:
        c.bad("batch", f"is {_what(rec['batch'])}, not {batch!r}" if "batch" in rec else "is missing")
    with_prod = [k for k in PROD_KEYS if k in rec]
    if with_prod and "prod" not in rec:
        c.bad("prod", f"is missing ({', '.join(with_prod)} compare{'s' if len(with_prod) == 1 else ''} it)")
    keys = {}
    for m in ("baseline", "candidate") + (("prod",) if "prod" in rec else ()):
        if m in rec:
            keys[m] = c.numbers(rec[m], m)
        else:
            c.bad(m, "is missing")
    c.siblings({m: k - CANDIDATE_ONLY for m, k in keys.items()}, "")
    metrics = set().union(set(), *keys.values()) - NOT_DELTAS
    tables = ["deltas"] + (["deltas_vs_prod", "prod_vs_base"] if "prod" in rec else [])
    compared = []
    for t in tables:
        if t not in rec:
            c.bad(t, "is missing")
        else:
            compared.append(c.deltas(rec[t], t, metrics))
    c.carry(keys, compared, "")
    c.flag(rec, "candidate_is_prod", "candidate_is_prod", required="prod" in rec)


def latency_problems(c: _Check, latency, references: list[str]) -> None:
    """The replay's paired timing record: per reference, the candidate/reference p95 ratio from one interleaved
    run, or the reason none was taken (`abstained`)."""
    if not c.record(latency, "latency"):
        return
    for ref in references:
        if ref not in latency:
            c.bad(f"latency.{ref}", "is missing")
    for ref, rec in latency.items():
        if not c.record(rec, f"latency.{ref}"):
            continue
        if "abstained" in rec:
            if not (isinstance(rec["abstained"], str) and rec["abstained"]):
                c.bad(f"latency.{ref}.abstained", f"is {_what(rec['abstained'])}, not a reason")
            continue
        for k in ("reference_p95_ms", "candidate_p95_ms", "p95_ratio"):
            if not finite(rec.get(k)):
                c.bad(f"latency.{ref}.{k}", f"is {_what(rec.get(k, None))}, not a finite number"
                      if k in rec else "is missing")
        c.count(rec, "n", f"latency.{ref}.n")
        if rec.get("interleaved") is not True:
            c.bad(f"latency.{ref}.interleaved", f"is {_what(rec.get('interleaved'))}: only an interleaved timing is "
                  "compared")


def replay_problems(rec, out: list) -> None:
    """metrics/replay.json: the arms' metrics (the same metrics in every arm), their contrasts, and the paired
    latency against the gate's reference (prod when arm P ran, else the base model)."""
    c = _Check(str(paths.REPLAY_METRICS), out)
    if not c.record(rec):
        return
    c.count(rec, "n_cases", "n_cases")
    c.flag(rec, "constrained", "constrained", required=False)
    arms = rec.get("arms")
    if not c.record(arms, "arms"):
        return
    for needed in ("A", "B", "C", "D"):
        if needed not in arms:
            c.bad(f"arms.{needed}", "is missing")
    keys = {a: c.numbers(m, f"arms.{a}") for a, m in arms.items()}
    c.siblings(keys, "arms.")
    contrasts = rec.get("contrasts", {})
    if c.record(contrasts, "contrasts"):  # the answer metrics only (the retriever's are the same in every arm)
        c.siblings({name: c.deltas(table, f"contrasts.{name}", None) for name, table in contrasts.items()},
                   "contrasts.")
    if "latency" not in rec:
        c.bad("latency", "is missing")
    else:
        latency_problems(c, rec["latency"], ["prod" if "P" in arms else "baseline"])


def decision_problems(rec, out: list) -> None:
    """metrics/decisions.json: every model's decision metrics, the pooled and per-batch delta tables, and the
    chain steps' extraction evaluation."""
    c = _Check(str(paths.DECISION_METRICS), out)
    if not c.record(rec):
        return
    c.count(rec, "n", "n", least=0)  # 0: the decision evaluation ran on a corpus without decision cases
    _models_and_deltas(c, rec, "")
    for part in ("per_batch", "per_batch_deltas"):  # reported per batch, read by no rule (a batch may have no cases)
        c.no_non_finite(rec.get(part) or {}, part)
    if "extraction" in rec:
        _models_and_deltas(c, rec["extraction"], "extraction.")
        if isinstance(rec["extraction"], dict):
            c.count(rec["extraction"], "n", "extraction.n")


def _models_and_deltas(c: _Check, rec, prefix: str) -> None:
    if not c.record(rec, prefix.rstrip(".")):
        return
    models = rec.get("models")
    if not c.record(models, f"{prefix}models"):
        return
    keys = {m: c.numbers(v, f"{prefix}models.{m}") for m, v in models.items()}
    c.siblings(keys, f"{prefix}models.")
    metrics = set().union(*keys.values()) - NOT_DELTAS if keys else set()
    deltas = rec.get("deltas")
    if c.record(deltas, f"{prefix}deltas"):
        c.carry(keys, [c.deltas(table, f"{prefix}deltas.{name}", metrics) for name, table in deltas.items()],
                f"{prefix}models.")
        for name in deltas:  # "<new>-<reference>": both models measured
            for m in name.split("-"):
                if m not in models:
                    c.bad(f"{prefix}models.{m}", f"is missing (deltas.{name} compares it)")


def agent_problems(rec, candidates: list[str], out: list) -> None:
    """metrics/agent.json: each judged agent adapter's scores, and its success delta against the reference."""
    c = _Check(str(paths.AGENT_METRICS), out)
    if not c.record(rec):
        return
    c.count(rec, "n_tasks", "n_tasks")
    models = rec.get("models")
    if c.record(models, "models"):
        keys = {m: c.numbers(v, f"models.{m}") for m, v in models.items()}
        c.siblings(keys, "models.")
        for m in candidates:
            if m not in models:
                c.bad(f"models.{m}", "is missing (the gate judges it)")
    for group in [k for k in rec if k.startswith("deltas_")]:
        if c.record(rec[group], group):
            c.siblings({name: c.deltas(table, f"{group}.{name}", None) for name, table in rec[group].items()},
                       f"{group}.")


def human_problems(rec, out: list) -> None:
    """metrics/human.json, once imported: the agreement and the usefulness deltas the human rules read."""
    c = _Check(str(paths.HUMAN_METRICS), out)
    if not c.record(rec) or not rec.get("imported"):
        return
    for scale, agreement in (rec.get("agreement") or {}).items():
        if c.record(agreement, f"agreement.{scale}") and "krippendorff_alpha" in agreement \
                and agreement["krippendorff_alpha"] is not None and not finite(agreement["krippendorff_alpha"]):
            c.bad(f"agreement.{scale}.krippendorff_alpha", f"is {_what(agreement['krippendorff_alpha'])}")
    for name, table in (rec.get("deltas") or {}).items():
        if c.record(table, f"deltas.{name}"):
            for k, d in table.items():
                if d is not None and (not isinstance(d, dict) or d.get("delta") is not None):
                    c.delta(d, f"deltas.{name}.{k}")


def problems(evaluation: dict, replay=None, decisions=None, human=None, agent=None,
             agent_candidates: list[str] | None = None, batches=()) -> list[tuple[str, str, str]]:
    """Every (file, field, problem) in the evidence the gate is about to read; [] when all of it is sound.
    `batches`: those the evaluation must cover (a batch without its record is named)."""
    out: list[tuple[str, str, str]] = []
    for batch in sorted(set(batches) - set(evaluation)):
        out.append((str(paths.eval_metrics(batch)), "(file)", f"is missing: the stage evaluate@{batch} has not written it"))
    for batch, rec in sorted(evaluation.items()):
        evaluation_problems(batch, rec, out)
    if replay is not None:
        replay_problems(replay, out)
    if decisions is not None:
        decision_problems(decisions, out)
    if human is not None:
        human_problems(human, out)
    if agent is not None:
        agent_problems(agent, agent_candidates or [], out)
    return out
