"""The stages that are not trainers, declared once (`clap.stages.spec`, `clap.stages.registry`) and registered by the
CLI from their specs alone (`clap.cli.common.register`): a spec's arguments are the command's, its `main` is what
the command runs, its lines are what the command prints."""

from pathlib import Path

import pytest
import typer
import yaml
from tests.conftest import ROOT
from tests.test_architecture import graph_of
from typer.testing import CliRunner

from clap import codedeps
from clap.cli import app
from clap.cli.common import register
from clap.config import ConfigError
from clap.stages import registry, trainers
from clap.stages.spec import REQUIRED, StageSpec


def _command(name: str):
    return typer.main.get_command(app).commands[name]


@pytest.mark.parametrize("spec", list(registry.STAGES.values()), ids=lambda s: s.name)
def test_every_registered_stage_is_a_command_with_its_specs_arguments_and_help(spec):
    command = _command(spec.command)
    assert command.help == spec.help and spec.help  # the stage's `main` docstring, never empty
    assert [p.name for p in command.params] == [a.name for a in spec.args]
    for arg, param in zip(spec.args, command.params):
        assert param.required == (arg.default is REQUIRED)
        assert (param.param_type_name == "argument") == arg.positional
        if not arg.positional:
            assert param.opts == [arg.flag]


def test_the_groups_register_their_stages_from_the_registry_and_no_stage_by_hand():
    text = (Path(codedeps.SRC) / "cli" / "data.py").read_text(encoding="utf-8")
    assert "@app.command" not in text and "stages.registry" in text
    assert {s.name for s in registry.group("data")} == {"demo_data", "ingest", "assetize", "materialize", "admit",
                                                       "index", "repair_queue", "base_model"}
    assert {s.name for s in registry.group("release")} == {"prod_adapter", "gate", "bundle"}
    assert {s.name for s in registry.group("evaluate")} == {"evaluate", "evaluate_decisions", "replay"}
    assert {s.name for s in registry.group("agent")} == {"agent_tasks", "agent_pairs", "agent_rm_check",
                                                        "evaluate_agent", "agent_pass_k"}
    # every DVC stage but the trainers' is a registered stage: no stage's command is written by hand in a group
    # (`ingest` opens the pipeline of a project `clap init` makes, where this repository's has `demo_data`)
    stages = set(yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))["stages"])
    assert stages - {f"train_{t}" for t in trainers.REGISTRY} == set(registry.STAGES) - {"ingest"}
    for spec in registry.STAGES.values():  # no group still imports a registered stage's module to call it
        group = (Path(codedeps.SRC) / "cli" / f"{spec.group}.py").read_text(encoding="utf-8")
        assert f"clap.stages.{spec.name} " not in group and f"import {spec.name}\n" not in group, spec.name


def _toy_app(main) -> typer.Typer:
    toy = typer.Typer(add_completion=False)
    register(StageSpec(name="toy_stage", group="data", main=main, helps={"out_dir": "where it writes"}), toy)
    toy.command("other")(lambda: None)  # two commands: typer then keeps each command's own name
    return toy


def test_a_registered_stage_parses_its_arguments_calls_main_with_params_and_prints_its_lines(tmp_path, monkeypatch):
    seen = {}

    def main(params, batch: str, out_dir: Path = Path("data/x"), engine: str | None = None):
        """Toy stage: says what it got."""
        seen.update(params=params, batch=batch, out_dir=out_dir, engine=engine)
        return [f"{batch} → {out_dir}", "warning: [red]a cell[/] as written", "done [b]"]

    monkeypatch.setattr("clap.cli.common._params", lambda: "the params")
    toy = _toy_app(main)
    r = CliRunner().invoke(toy, ["toy-stage", "b2", "--out-dir", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert seen == {"params": "the params", "batch": "b2", "out_dir": tmp_path, "engine": None}
    assert r.output.splitlines() == [f"b2 → {tmp_path}", "warning: [red]a cell[/] as written", "done [b]"]

    r = CliRunner().invoke(toy, ["toy-stage"])  # the positional it requires
    assert r.exit_code == 2 and "Missing argument" in r.output
    r = CliRunner().invoke(toy, ["toy-stage", "b1", "--help"])
    assert "Toy stage: says what it got." in r.output and "where it writes" in r.output and "--out-dir" in r.output


def test_a_stage_whose_main_yields_prints_each_line_before_its_work_goes_on(monkeypatch):
    """An evaluation says which prod is the baseline and which backend answers before minutes of decoding: a `main`
    that yields has each line printed when it is yielded, tables included."""
    from rich.table import Table

    printed = []
    monkeypatch.setattr("clap.cli.common._params", lambda: "the params")
    monkeypatch.setattr("clap.cli.common.console.print", lambda *a, **k: printed.append(a[0]))

    def main(params):
        """Toy stage that talks while it works."""
        yield "baseline: prod v1"
        assert printed == ["baseline: prod v1"]  # printed before the work below
        table = Table(title="arms")
        yield table
        assert printed[-1] is table

    r = CliRunner().invoke(_toy_app(main), ["toy-stage"])
    assert r.exit_code == 0, r.output
    assert printed[0] == "baseline: prod v1" and isinstance(printed[1], Table)


def test_a_users_mistake_in_a_registered_stage_is_one_line_and_exit_2(monkeypatch):
    monkeypatch.chdir(ROOT)  # a project: params.yaml loads, then the stage refuses the flag before any work
    r = CliRunner().invoke(app, ["assetize", "--engine", "spark"])
    assert r.exit_code == 2, r.output
    assert r.output.strip() == "error: --engine 'spark': choose from local, ray"


def test_ingest_without_an_ingest_section_names_the_file_that_adds_it(monkeypatch):
    from clap.stages import ingest

    class NoIngest:
        ingest = None

    with pytest.raises(ConfigError, match="conf/ingest/default.yaml"):
        ingest.main(NoIngest())


def test_a_registered_stage_runs_through_the_registry_and_its_own_group_only():
    graph = graph_of()
    closure = codedeps.stage_closure("ingest", graph)
    assert {"clap.stages.ingest", "clap.stages.registry", "clap.stages.spec", "clap.cli.data",
            "clap.cli.common"} <= closure
    assert not {m for m in closure if m.startswith("clap.stages.")} - {"clap.stages.ingest", "clap.stages.registry",
                                                                       "clap.stages.spec", "clap.stages"}
    assert "clap.cli.train" not in closure and "clap.cli.evaluate" not in closure
    assert codedeps.spec_group("base_model") == "data"
    # a trainer does not rerun when a data stage is added to the registry
    assert "clap.stages.registry" not in codedeps.stage_closure("train_sft", graph)


def test_a_registry_stage_without_a_group_is_named(tmp_path):
    (tmp_path / "stages").mkdir()
    (tmp_path / "stages" / "lost.py").write_text("STAGE = StageSpec(name='lost', main=print)\n", encoding="utf-8")
    with pytest.raises(KeyError, match="lost.py has no StageSpec"):
        codedeps.spec_group("lost", tmp_path)
