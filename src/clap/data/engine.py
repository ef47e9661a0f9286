"""Where units of work run: on this machine in `workers` processes, or as Ray Data tasks (`--engine ray`).

    summaries = map_units("ray", units, functools.partial(stage_unit, work, ...), workers=2)

Both engines call the same function on the same unit numbers and return its summaries in unit
order, so outputs do not depend on the engine. The local engine runs one unit per process of a
spawned pool (one process, no pool, when `workers` or `units` is 1): a unit's work is pyarrow/RE2
kernels and Python in turn, about 1.2 cores, so two processes on two cores beat threads in one.
Ray runs on the cluster named by `RAY_ADDRESS`, else on a local cluster of `workers` CPUs started
for the call (and stopped after it); the units' files must then be on storage every node sees (on
one machine: the stage's own output folder).
"""

from __future__ import annotations

import json
import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from clap.errors import UserError

ENGINES = ("local", "ray")


class WorkerDied(UserError, RuntimeError):
    """A worker process of the local pool ended without an answer (killed: most often out of memory)."""


def map_units(engine: str, units: int, work: Callable[[int], dict], workers: int) -> list[dict]:
    if engine == "local":
        if min(workers, units) == 1:
            return [work(u) for u in range(units)]
        # spawn, not fork: the caller holds DuckDB and pyarrow thread pools, which a forked child would inherit locked
        try:
            with ProcessPoolExecutor(min(workers, units), mp_context=multiprocessing.get_context("spawn")) as pool:
                return list(pool.map(work, range(units)))
        except BrokenProcessPool:
            raise WorkerDied(f"a worker process died running {units} units on {workers} workers (killed, most often "
                             "out of memory): lower the stage's memory_budget_mb or workers in conf/config.yaml") from None
    if engine == "ray":
        return _ray_map(units, work, workers)
    raise ValueError(f"unknown engine {engine!r} (choose from {', '.join(ENGINES)})")


def import_ray():
    """Ray (the `ray` extra), or one line saying how to install it."""
    try:
        import ray
        import ray.data  # noqa: F401  (ray.data is what the engines use)
    except ImportError:
        raise UserError("the ray engine needs Ray: pip install 'clap-loop[ray]' (`make setup` installs it)") from None
    return ray


def ensure_ray(workers: int) -> bool:
    """Connect to `RAY_ADDRESS`, else start a local cluster of `workers` CPUs; True when this call started it."""
    ray = import_ray()

    started = not ray.is_initialized()
    if started:
        address = os.environ.get("RAY_ADDRESS") or None
        ray.init(address=address, num_cpus=None if address else workers, include_dashboard=False,
                 log_to_driver=False, logging_level="ERROR")
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.execution_options.preserve_order = True
    return started


def _ray_map(units: int, work: Callable[[int], dict], workers: int) -> list[dict]:
    started = ensure_ray(workers)
    import ray
    try:
        def one_unit(batch: dict) -> dict:
            return {"unit": batch["unit"], "summary": [json.dumps(work(int(u))) for u in batch["unit"]]}

        items = ray.data.from_items([{"unit": u} for u in range(units)], override_num_blocks=units)
        rows = items.map_batches(one_unit, batch_size=1, num_cpus=1).take_all()
    finally:
        if started:
            ray.shutdown()
    return [json.loads(r["summary"]) for r in sorted(rows, key=lambda r: int(r["unit"]))]
