"""The `clap` command: one sub-command per stage, each a thin wrapper around `stages/<name>.run`, grouped by
concern (project, data, train, agent, evaluate, release, serve, feedback, demo); `clap.cli.common` holds what they share.

    clap --help
"""
# isort: skip_file  (the groups register their commands in this order: `clap --help` lists them so)

from clap.cli import agent, data, demo, evaluate, feedback, project, release, serve, train  # noqa: F401  (importing a group registers its commands)
from clap.cli.common import app, console
from clap.cli.demo import print_drill

__all__ = ["app", "console", "print_drill"]

if __name__ == "__main__":
    app()
