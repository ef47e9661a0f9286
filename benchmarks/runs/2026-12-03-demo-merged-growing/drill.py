"""The demo's rollback drill on a finished `make demo` checkout (cwd), with this code: the real-model run's end state."""
from pathlib import Path

from clap.cli import console, print_drill
from clap.release import rounds
from clap.release import timeline as tl

print_drill(rounds.drill(Path(".")))
rows = tl.rounds(Path("."), since="6bb11fd")
console.print(tl.table(rows), width=250)
