"""What a stage that is not a trainer is, declared once: the spec its stage module exports as `STAGE`, which
`clap.stages.registry` collects and the CLI registers generically (`clap.cli.common.register`).

    clap ingest --help     (the command, its arguments and its help come from `clap.stages.ingest.STAGE`)

A stage module keeps two functions: `run(section, inputs)`, the stage's work on its typed config section, and `main`,
what the command does with `params.yaml` and the command line — picks the section, checks the inputs (one line
naming a missing one and the command that makes it), calls `run` and returns the lines the command prints. A `main`
that says something before its long work (which prod is the baseline, which backend answers) is a generator: each
line it yields is printed when it is yielded. The CLI only parses the arguments the spec declares, loads
`params.yaml`, calls `main` and prints. Trainers have their own
spec (`clap.train.spec`); adding a stage: docs/how-to/extend.md.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

REQUIRED = ...  # an argument's default when the user must give it


@dataclass(frozen=True)
class Arg:
    """One argument of a stage's command: `--name` (dashes for underscores), or positional; `kind` is its type
    (`str`, `Path`), `default` its value when absent (`REQUIRED`: it must be given)."""
    name: str
    kind: type
    default: Any = None
    help: str = ""
    positional: bool = False

    @property
    def flag(self) -> str:
        return self.name if self.positional else "--" + self.name.replace("_", "-")


@dataclass(frozen=True)
class StageSpec:
    """One stage. `name`: its module `clap.stages.<name>` and its DVC stage (`<name>` or `<name>@<item>`);
    `command`: what `clap` calls it; `group`: the CLI module that lists it (`clap.cli.<group>`); `main(params,
    **arguments)`: the command's work, returning or yielding the lines it prints (a line that begins `warning: ` is
    printed as a warning; a rich table as a table); its docstring is the command's help, and its parameters after `params` are the command's arguments
    (`args`); `helps`: an argument's help text, by name."""
    name: str
    group: str
    main: Callable[..., Iterable]
    helps: dict[str, str] = field(default_factory=dict)

    @property
    def args(self) -> tuple[Arg, ...]:
        """`main`'s parameters after `params`, as the command's arguments: its name, type (`X | None` → `X`) and
        default; one without a default is required and positional."""
        parameters = list(inspect.signature(self.main, eval_str=True).parameters.values())[1:]
        return tuple(Arg(p.name, _kind(p.annotation), REQUIRED if p.default is p.empty else p.default,
                         self.helps.get(p.name, ""), positional=p.default is p.empty) for p in parameters)

    @property
    def command(self) -> str:
        return self.name.replace("_", "-")

    @property
    def help(self) -> str:
        return inspect.cleandoc(self.main.__doc__ or "")


def _kind(annotation) -> type:
    """`Path | None` → `Path`: the type a command line's text is parsed into."""
    kinds = [a for a in typing.get_args(annotation) if a is not type(None)]
    return kinds[0] if kinds else annotation
