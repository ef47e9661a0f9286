"""Where the loop keeps each artifact, relative to the project root: written here once, used by the
CLI defaults, the stages that read other stages' outputs, the bundle, the report and the summary.
`dvc.yaml` names the same paths (a test checks that every path here it mentions agrees).
"""

from pathlib import Path

# The files of an adapter folder (PEFT's two and CLAP's manifest of pinned hashes, which a base model's folder has too)
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
MANIFEST = "manifest.json"
ARTIFACT = "clap-adapter"  # the registry's artifact name in GTO's tags (`clap-adapter@v0.0.1`, `clap-adapter#prod#1`)
RAW = Path("data/raw")
ASSETS = Path("data/assets")
MATERIALIZED = Path("data/materialized")
ADMISSION = Path("data/admission")
INDEX = Path("data/index")
EVAL = Path("data/eval")
REPLAY = Path("data/replay")
EVAL_DECISIONS = Path("data/eval_decisions")
MODELS = Path("models")
CHECKPOINTS = Path("models/checkpoints")
PROD_ADAPTER = Path("models/prod")
SHIPPED = Path("models/shipped")  # the adapter of the candidate the bundle ships, copied by `clap bundle`: the path
                                  # dvc.yaml's `artifacts: clap-adapter` names (`dvc artifacts get … --rev vX`)
METRICS = Path("metrics")
EVAL_METRICS = Path("metrics/eval")
REPLAY_METRICS = Path("metrics/replay.json")
DECISION_METRICS = Path("metrics/decisions.json")
GATE = Path("metrics/gate.json")
HEADLINE = Path("metrics/headline.json")  # the gate stage's headline figures: the one file `dvc metrics show` prints
GATE_AGENT = Path("data/gate/agent.json")  # the gate's agent verdict alone ({candidate, decision}): what agent_pass_k
                                           # samples follows it, not every change of metrics/gate.json
BUNDLE = Path("release/bundle.json")
BUNDLES = Path("release/bundles")  # one evidence bundle per candidate the gate judged: <candidate>.json
PROD_POINTER = Path("release/prod.json")
CODE_PINS = Path("clap-code.json")  # a `clap init` project: the installed CLAP's code per stage (clap.codedeps)
REPAIR_QUEUE = Path("repair/queue.jsonl")
REPAIR_FIXED = Path("repair/fixed")
AGENT_CORRECTIONS = Path("repair/agent")  # trajectories people corrected (*.jsonl): the next round's agent SFT reads them
HUMAN_METRICS = Path("metrics/human.json")
AGENT_TASKS = Path("data/agent")
AGENT_PAIRS = Path("data/agent_pairs")
AGENT_EVAL = Path("data/eval_agent")
AGENT_METRICS = Path("metrics/agent.json")
AGENT_PASS_K = Path("data/eval_agent_pass_k")  # the sampled episodes of the shipped agent adapter and prod's
AGENT_PASS_K_METRICS = Path("metrics/agent_pass_k.json")  # their pass^k, after the gate
AGENT_RM_CHECK = Path("data/agent_rm_check")  # the reward model's verdict (verdict.json): may it drive training?
AGENT_RM_CHECK_METRICS = Path("metrics/agent_rm_check.json")  # ... and the figures behind it
INBOX = Path("feedback/production.jsonl")  # the flywheel's inbox: human-flagged and canary-failed cases
AGENT_HUMAN_LABELS = Path("feedback/human/agent_labels.jsonl")  # people's labels on agent episodes (`clap human import`),
                                                                 # git-tracked: the reward model's check reads them

# Outside the pipeline (written by `clap human …` and `clap canary …`, which people run between rounds):
HUMAN_EXPORT = Path("feedback/human/export")  # sent to annotators
HUMAN_KEYS = Path("feedback/human/keys")  # the blind mapping, git-tracked, never sent
CANARY_LOGS = Path("feedback/canary")  # request and outcome logs (`dvc add feedback/canary`)
CANARY_METRICS = Path("metrics/canary.json")  # `clap canary analyze`; read by `clap canary conclude`
CANARY_AGENT_LOGS = CANARY_LOGS / "agent"  # the agent canary's logs (`clap canary serve --agent`), one row per turn
CANARY_AGENT_METRICS = Path("metrics/canary_agent.json")  # `clap canary analyze --agent`; conclude reads it too
SIMULATED_FIXES = REPAIR_FIXED / "simulated_annotator.jsonl"  # `clap demo-annotate`: the demo's simulated annotator
REPAIR_EFFECT = Path("metrics/repair_effect.json")  # `clap demo`: what a round's repaired rows did
ANSWER_STORE = Path("data/answer_store")  # greedy answers by content address (clap.evaluate.answer_store), a cache beside
                                          # DVC's outputs: evaluate, replay and the decision evaluation read and add
OUTSIDE_PIPELINE = (HUMAN_EXPORT, HUMAN_KEYS, CANARY_LOGS, CANARY_AGENT_LOGS, CANARY_METRICS, CANARY_AGENT_METRICS, SIMULATED_FIXES, REPAIR_EFFECT, ANSWER_STORE,
                    CODE_PINS)  # CODE_PINS: a `clap init` project's pipeline only (clap.project)


GUARD_REPORT_FILE = "guard_report.json"  # in every trainer's output folder: ok, stopped (with the trip) or disabled
TRAIN_METRICS_FILE = "train_metrics.json"  # in every trainer's output folder: steps, loss, data, timings


def guard_report(kind: str) -> Path:
    """A trainer's guard report (`models/sft/guard_report.json`), read by the gate, the bundle and the report."""
    return MODELS / kind / GUARD_REPORT_FILE


def train_metrics(kind: str) -> Path:
    """A trainer's stage metrics (`metrics/train_sft.json`), written once per run (an output:
    `dvc metrics show --targets metrics/train_sft.json` reads it)."""
    return METRICS / f"train_{kind}.json"


def adapter(kind: str) -> Path:
    """The adapter folder of a trainer's output (`models/sft/adapter`)."""
    return MODELS / kind / "adapter"


def prod_agent_adapter(prod: Path = PROD_ADAPTER) -> Path:
    """The tool-calling agent adapter the release in prod shipped, restored beside its extraction adapter."""
    return Path(prod) / "agent_adapter"


def dvclive(kind: str) -> Path:
    """A trainer's DVCLive log (`metrics/dvclive/sft`): its `metrics.json` and per-step `plots/`, declared in dvc.yaml."""
    return METRICS / "dvclive" / kind


def admission(batch: str) -> Path:
    return ADMISSION / f"{batch}.json"


def eval_metrics(batch: str) -> Path:
    return EVAL_METRICS / f"{batch}.json"
