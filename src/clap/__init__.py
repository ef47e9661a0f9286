"""CLAP: closed-loop training, evaluation and release control for domain-agent post-training."""

__version__ = "0.1.0"
