"""One module per stage of the loop; each exposes a pure-ish `run(cfg, ...)` and nothing else public."""
