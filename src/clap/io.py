"""Quarantine records, finding inputs, and writing outputs atomically.

A row that cannot be decoded or parsed is never dropped: it comes back as a quarantine record
(stage, file, row, rule, column, original). A file that cannot be read at all raises
`InputFileError` naming the file and the reason. Writers go through a temporary path in the same
folder and an atomic rename, so a crash never leaves an output that DVC would accept.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pandas as pd

from clap import vcs
from clap.errors import UserError

SUFFIXES = (".jsonl", ".csv", ".parquet")


class InputFileError(UserError, RuntimeError):
    """A whole input file is unusable; the message names the file and the reason."""


def git_show(root: Path, rev: str, path: Path | str) -> tuple[str | None, str]:
    """(`path`'s text as committed at `rev`, read from git's object store and not the working tree, or None;
    git's complaint when there is none)."""
    r = vcs.git(root, "show", f"{rev}:{Path(path).as_posix()}")
    return (r.stdout, "") if r.returncode == 0 else (None, r.stderr.strip()[:160])


def git_text(root: Path, rev: str, path: Path | str, refuse: type[Exception]) -> str:
    """`path` as committed at `rev`, or `refuse` raised naming the revision, the path and git's complaint."""
    text, why = git_show(root, rev, path)
    if text is None:
        raise refuse(f"{rev}: no committed {Path(path).as_posix()} ({why})")
    return text


def quarantine_record(stage: str, file: str, row: int | None, rule: str, column: str | None, original) -> dict:
    return {"stage": stage, "file": file, "row": row, "rule": rule, "column": column, "original": original}


def require_inputs(needed: list[tuple[Path, str]]) -> None:
    """Before any work: every (path, the command that makes it) exists, else one line naming the first missing
    path and that command — never minutes of model loading and then a traceback."""
    for path, made_by in needed:
        if not Path(path).exists():
            raise InputFileError(f"{path}: missing (made by `{made_by}`; run it first)")


def find_input(folder: Path, name: str) -> Path:
    """`folder/name.{jsonl,csv,parquet}` — exactly one must exist, and be a file."""
    found = [folder / f"{name}{s}" for s in SUFFIXES if (folder / f"{name}{s}").exists()]
    if not found:
        raise InputFileError(f"{folder}/{name}.(jsonl|csv|parquet): no such file")
    folders = [p for p in found if not p.is_file()]
    if folders:
        raise InputFileError(f"{folders[0]}: is a folder, not a file; the raw {name} table must be one file")
    if len(found) > 1:
        raise InputFileError(f"{folder}/{name}: several formats present ({', '.join(p.name for p in found)})")
    return found[0]


def jsonable(value):
    """Turn numpy/pandas scalars and NaN into plain JSON values."""
    if isinstance(value, float) and value != value:
        return None
    if hasattr(value, "item") and not isinstance(value, (list, dict, str)):
        try:
            return value.item()
        except (ValueError, AttributeError):
            return str(value)
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if value is pd.NA or value is pd.NaT:
        return None
    return value


OUTPUT_MARKER = ".clap-output"  # inside every folder a stage writes: the proof that CLAP created it


class OutputRefused(UserError, RuntimeError):
    """An output path that would destroy something CLAP did not create, or that cannot be written."""


def check_output_dir(out: Path, inputs: tuple[Path, ...] = ()) -> None:
    """Refuse an output folder that overlaps an input, or exists without CLAP's marker.

    A stage replaces only a folder it created itself: `--out data/raw` (an input), `--out .` (a
    parent of everything) or any unrelated existing folder is refused before any work starts.
    """
    out = Path(out)
    target = out.resolve()
    for inp in inputs:
        if inp is None:
            continue
        src = Path(inp).resolve()
        if target == src or target in src.parents or src in target.parents:
            raise OutputRefused(f"{out}: output overlaps the input {inp}; a stage never writes where it reads")
    blocking = next((p for p in out.parents if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise OutputRefused(f"{out}: cannot write ({blocking} is a file, not a folder)")
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise OutputRefused(f"{out}: exists and is not a folder; refusing to replace it")
    if out.is_dir() and any(out.iterdir()) and not (out / OUTPUT_MARKER).is_file():
        raise OutputRefused(f"{out}: existing folder not created by clap (no {OUTPUT_MARKER}); "
                            "choose another output path or remove it yourself")


def _disk_error(exc: BaseException) -> bool:
    """A full, read-only or forbidden output (pyarrow's writers may leave errno unset and say it in words)."""
    if not isinstance(exc, OSError):
        return False
    return exc.errno in (errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EDQUOT) or any(
        words in str(exc) for words in ("No space left", "Read-only file system", "Disk quota exceeded"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _clear_stale(out: Path) -> None:
    """Remove temporary siblings (`.name.tmp-PID-*`, `.name.old-PID`) left by killed runs."""
    for p in out.parent.glob(f".{out.name}.*-*"):
        m = re.fullmatch(rf"\.{re.escape(out.name)}\.(?:tmp|old)-(\d+)(?:-.*)?", p.name)
        if m and p.is_dir() and not _alive(int(m.group(1))):
            shutil.rmtree(p, ignore_errors=True)


@contextlib.contextmanager
def atomic_dir(out: Path, inputs: tuple[Path, ...] = ()) -> Iterator[Path]:
    """Yield a temporary sibling folder; on success it replaces `out`, on error it is removed.

    `out` is checked first (`check_output_dir`): never an input, never a folder CLAP did not create.
    The new folder carries the marker; an unwritable or full disk becomes `OutputRefused` naming `out`.
    """
    out = Path(out)
    check_output_dir(out, inputs)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputRefused(f"{out}: cannot write ({exc.strerror or exc})") from None
    with _writer_lock(out):
        yield from _write_dir(out)


def _write_dir(out: Path) -> Iterator[Path]:
    try:
        _clear_stale(out)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-{os.getpid()}-", dir=out.parent))
    except OSError as exc:
        raise OutputRefused(f"{out}: cannot write ({exc.strerror or exc})") from None
    try:
        (tmp / OUTPUT_MARKER).write_text("created by clap; this folder is replaced whole by the stage that wrote it\n")
        yield tmp
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if _disk_error(exc):
            raise OutputRefused(f"{out}: cannot write ({exc.strerror or exc}); nothing was changed") from None
        raise
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(out)


@contextlib.contextmanager
def _writer_lock(out: Path) -> Iterator[None]:
    """One writer per output at a time: an exclusive `flock` on `.name.lock` beside it, which holds the writer's pid
    for the message. The kernel takes the lock and the pid's file in one step and releases it when the writer exits
    however it ends (a killed writer leaves no stale lock to take over, so two writers can never both hold it). A
    second writer gets `OutputRefused` naming the first and leaves nothing behind."""
    import fcntl

    lock = out.with_name(f".{out.name}.lock")
    for _ in range(50):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o644)
        except OSError as exc:
            raise OutputRefused(f"{out}: cannot write ({exc.strerror or exc})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
            os.close(fd)
            if holder == str(os.getpid()):
                raise OutputRefused(f"{out}: this process is writing it already") from None
            raise OutputRefused(f"{out}: another clap process (pid {holder}) is writing it; nothing was changed "
                                "— wait for it") from None
        try:
            same = os.fstat(fd).st_ino == os.stat(lock).st_ino  # not a file its last holder unlinked meanwhile
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    else:
        raise OutputRefused(f"{out}: the lock {lock} kept changing under this process; nothing was changed")
    try:
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        yield
    finally:
        lock.unlink(missing_ok=True)  # before the release: a writer waiting on this file retries on a fresh one
        os.close(fd)


def write_switched_off(command: str, switch: str, out: Path, empty_files: tuple[str, ...],
                       metrics: Path | None = None) -> str:
    """The outputs of a stage whose switch is off (`agent.enabled: false`): its folder with its files empty beside
    report.json saying why, and its metrics file (when it has one) saying the same — the outputs DVC tracks exist,
    the pipeline runs on, and no reader mistakes an old run's for this one's. Returns the line the command prints."""
    report = {"status": "disabled", "note": f"{switch} is false: {command} did not run"}
    with atomic_dir(out) as tmp:
        for name in empty_files:
            (tmp / name).write_text("")
        write_json(tmp / "report.json", report)
    if metrics is not None:
        write_json(metrics, report)
    return f"{command}: disabled ({switch} is false)"


def atomic_write_text(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_json(path: Path, obj) -> None:
    atomic_write_text(path, json.dumps(jsonable(obj), indent=2, ensure_ascii=False, sort_keys=False) + "\n")


def write_jsonl(path: Path, rows) -> None:
    atomic_write_text(path, "".join(json.dumps(jsonable(r), ensure_ascii=False) + "\n" for r in rows))


class DuplicateKey(ValueError):
    """A JSON object names one key twice; which value was meant cannot be known."""


def unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """`object_pairs_hook` that refuses a key repeated inside one object (json keeps the last one silently)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise DuplicateKey(f"key {dup!r} appears twice in one object")
    return out


def loads_strict(text: str | bytes):
    """json.loads that refuses duplicate keys (`DuplicateKey`)."""
    return json.loads(text, object_pairs_hook=unique_keys)


def read_json(path: Path):
    """The JSON document at `path`; unreadable JSON or a key repeated inside one object is `InputFileError`
    naming the file."""
    path = Path(path)
    try:
        return loads_strict(path.read_text(encoding="utf-8"))
    except (DuplicateKey, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputFileError(f"{path}: not a valid JSON document ({exc})") from None
    except IsADirectoryError:
        raise InputFileError(f"{path}: is a folder, a JSON file was expected") from None


def read_json_if_exists(path: Path):
    """The JSON document at `path`, or None when the stage that writes it has not run."""
    return read_json(path) if Path(path).exists() else None


def read_jsonl(path: Path) -> list[dict]:
    """Every JSON line of `path`; a malformed line or a key repeated in one object is `InputFileError` naming
    the file and line."""
    path = Path(path)
    if path.is_dir():
        raise InputFileError(f"{path}: is a folder, a JSONL file was expected")
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            try:
                out.append(loads_strict(line))
            except (DuplicateKey, json.JSONDecodeError) as exc:
                raise InputFileError(f"{path}: line {n} is not valid JSON ({exc})") from None
    return out


def write_parquet(path: Path, df: pd.DataFrame) -> None:
    tmp = Path(path).with_name(f".{Path(path).name}.tmp")
    df.to_parquet(tmp, index=False)
    os.replace(tmp, path)


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def content_hash(*parts) -> str:
    """sha256 of the parts joined by a unit separator (None counts as empty): the content address of a row."""
    return hashlib.sha256("\x1f".join("" if p is None else str(p) for p in parts).encode()).hexdigest()


def sha256_json(obj) -> str:
    return hashlib.sha256(json.dumps(jsonable(obj), sort_keys=True, ensure_ascii=False).encode()).hexdigest()
