"""Where units run (`clap.data.engine`): the local pool answers in unit order, and a worker that dies is one line."""

import os

import pytest

from clap.data.engine import WorkerDied, map_units


def test_the_local_pool_answers_in_unit_order():
    assert map_units("local", 5, abs, 2) == [0, 1, 2, 3, 4]  # spawned processes, results by unit number
    assert map_units("local", 3, abs, 1) == [0, 1, 2]  # one worker: no pool


def test_a_killed_worker_is_named_with_what_to_lower():
    with pytest.raises(WorkerDied, match="memory_budget_mb or workers"):
        map_units("local", 2, os._exit, 2)  # the worker process ends abruptly, as the kernel's OOM killer ends it


def test_an_unknown_engine_is_refused():
    with pytest.raises(ValueError, match="choose from local, ray"):
        map_units("spark", 1, abs, 1)


def test_the_ray_engine_without_ray_says_how_to_install_it(monkeypatch):
    import sys

    from clap.data.engine import import_ray
    from clap.errors import UserError

    monkeypatch.setitem(sys.modules, "ray", None)  # as if the `ray` extra were not installed
    with pytest.raises(UserError, match=r"pip install 'clap-loop\[ray\]'"):
        import_ray()
