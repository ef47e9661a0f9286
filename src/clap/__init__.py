"""CLAP: closed-loop training, evaluation and release control for domain-agent post-training."""

__version__ = "0.1.0"

# The house, ground floor first: a module imports only from its own floor or the floors below it, and no two
# modules import each other, directly or around a circle (tests/test_architecture.py checks every import).
# A stage module (`clap.stages.*`) is imported by the CLI (`clap.cli.*`) alone.
LAYERS = (
    ("errors", "paths", "io", "config", "domain", "vcs", "lazy"),  # the domain core and the plumbing everything uses
    ("integrity", "model", "retrieval"),  # adapter and artifact hashes; the base model; the retrievers
    ("data",),  # ingest, assetize, materialize, admission
    ("evaluate",),  # engines, decoding, metrics, statistics, reports
    ("train",),  # what the trainers share; rewards, guards, tracking
    ("agent",),  # the tool-calling agent track
    ("release",),  # gate, bundle, registry, prod, export
    ("feedback",),  # human evaluation, canary, traffic
    ("serve",),  # clap serve and the canary's server
    ("demo",),  # the demo's corpus, simulated people and rounds
    ("stages",),  # one file per DVC stage
    ("cli", "project", "reference", "codedeps", "dag"),  # the commands, and what reads the code itself
)
