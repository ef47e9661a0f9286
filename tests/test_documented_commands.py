"""Every command the README and the docs' how-to and tutorial pages show in a `bash` block still exists as written:
each `clap` line names a real sub-command and only options it has (checked against the CLI's own parser), each
`make` line is a target `make -n` accepts, each `dvc` sub-command answers `--help`. A renamed flag or a removed
command fails here, before a newcomer meets it. (The tutorial's commands also run for real: tests/test_tutorial.py.)"""

import re
import shlex
import subprocess
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs" / "how-to").glob("*.md")),
         *sorted((ROOT / "docs" / "tutorial").glob("*.md"))]


def bash_lines(text: str) -> list[str]:
    """The command lines of a page's ```bash blocks: comments dropped, continuation lines joined."""
    lines, inside = [], False
    for raw in text.splitlines():
        if raw.strip().startswith("```"):
            inside = raw.strip() == "```bash" if not inside else False
            continue
        if inside:
            line = re.sub(r"(^|\s)#.*$", "", raw).strip()
            if lines and lines[-1].endswith("\\"):
                lines[-1] = lines[-1][:-1] + " " + line
            elif line:
                lines.append(line)
    return lines


def commands(line: str) -> list[list[str]]:
    """The simple commands of one line: split at `&&`, `||`, `;`, `|` and the docs' ` / ` (two commands shown as
    alternatives); optional parts in `[…]` are kept, their `|` alternatives each checked."""
    line = line.replace("[", " ").replace("]", " ")
    out = []
    for part in re.split(r"&&|\|\||;|\s\|\s|\s/\s", line):
        try:
            words = shlex.split(part)
        except ValueError:
            words = part.split()
        if words:
            out.append(words)
    return out


@cache
def _clap():
    import typer

    from clap.cli import app

    return typer.main.get_command(app)


def clap_problem(words: list[str]) -> str | None:
    """None when `clap WORDS…` names a sub-command and only options it has; else what is wrong."""
    command, path = _clap(), ["clap"]
    rest = words[1:]
    while hasattr(command, "get_command") and rest and not rest[0].startswith("-"):  # a group (typer's own click)
        sub = command.get_command(None, rest[0])
        if sub is None:
            return f"`{' '.join(path)}` has no sub-command `{rest[0]}`"
        command, path, rest = sub, [*path, rest[0]], rest[1:]
    if getattr(command, "ignore_unknown_options", False) or (command.context_settings or {}).get("ignore_unknown_options"):
        return None  # a pass-through (`clap exp run …` hands its options to `dvc exp run`)
    known = {o for p in command.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}
    for word in rest:
        flag = word.split("=", 1)[0]
        if flag.startswith("-") and flag not in known and not re.fullmatch(r"-\d.*", flag):
            return f"`{' '.join(path)}` has no option `{flag}`"
    return None


CASES = [(page.relative_to(ROOT).as_posix(), words) for page in PAGES
         for line in bash_lines(page.read_text()) for words in commands(line)]


def test_the_pages_show_commands_to_check():
    tools = {words[0] for _, words in CASES}
    assert {"clap", "make", "dvc"} <= tools and len(CASES) > 40


@pytest.mark.parametrize("page, words", [c for c in CASES if c[1][0] == "clap"],
                         ids=lambda v: v if isinstance(v, str) else " ".join(v)[:60])
def test_each_clap_command_shown_exists_with_its_options(page, words):
    assert clap_problem(words) is None, f"{page}: {' '.join(words)}: {clap_problem(words)}"


def test_each_make_target_shown_is_one_make_accepts():
    shown = sorted({" ".join(words[1:]) for _, words in CASES if words[0] == "make"})
    assert shown
    for target in shown:
        done = subprocess.run(["make", "-n", *shlex.split(target)], cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 0, f"make -n {target}: {done.stderr.strip()}"


def test_each_dvc_sub_command_shown_exists():
    subs = sorted({words[1] for _, words in CASES if words[0] == "dvc" and len(words) > 1})
    assert "repro" in subs
    for sub in subs:
        done = subprocess.run(["dvc", sub, "--help"], capture_output=True, text=True)
        assert done.returncode == 0, f"dvc {sub}: {done.stderr.strip()[-200:]}"


@pytest.mark.parametrize("words, problem", [
    (["clap", "serve", "--base"], None),
    (["clap", "serve", "--no-such-flag"], "`clap serve` has no option `--no-such-flag`"),
    (["clap", "no-such-thing"], "`clap` has no sub-command `no-such-thing`"),
    (["clap", "human", "export"], None),
    (["clap", "params", "-S", "model=x"], None),
])
def test_the_check_itself_can_fail(words, problem):
    assert clap_problem(words) == problem
