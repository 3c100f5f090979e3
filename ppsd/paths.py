"""Where things live, and writes that never leave half a file behind."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import tempfile
from pathlib import Path

from ppsd.errors import UserError

PROJECT_ROOT = Path(__file__).resolve().parent.parent
EXAMPLES_DIR = PROJECT_ROOT / "examples"
RUNS_DIR = PROJECT_ROOT / "runs"
# Spec-Bench prompts are read by path from the shared folder beside the checkout, never copied.
SHARED_DIR = PROJECT_ROOT.parent / "shared"  # data read by path, never copied in
SPEC_BENCH_PATH = SHARED_DIR / "datasets" / "spec_bench" / "question.jsonl"
AZURE_CONV_TRACE = SHARED_DIR / "datasets" / "azure_llm_inference_2023" / "AzureLLMInferenceTrace_conv.csv"


def cache_dir() -> Path:
    """`$PPSD_CACHE`, else `~/.cache/ppsd`; created on first use."""
    path = Path(os.environ.get("PPSD_CACHE") or Path.home() / ".cache" / "ppsd")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=1, sort_keys=False) + "\n")


PARTIAL_SUFFIX = ".partial"


@contextlib.contextmanager
def atomic_dir(final: str | Path, overwrite: bool = True):
    """Yield a temporary sibling folder; it becomes `final` only if the block succeeds. An earlier
    folder at `final` is swapped out in one step (Linux's RENAME_EXCHANGE; elsewhere two renames whose
    interruption the next call undoes), so a run stopped at any point, even by SIGKILL, leaves it
    byte-identical and never a half-written folder under its name. The temporary folder is named
    `.<name>.<random>.<pid>.partial`; the next call removes those of processes that no longer run."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    _recover(final)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=f".{os.getpid()}{PARTIAL_SUFFIX}",
                                dir=final.parent))
    tmp.chmod(0o777 & ~_umask())  # mkdtemp's folder is private; the result should not be
    try:
        yield tmp
        if final.exists():
            if not overwrite:
                raise FileExistsError(final)
            _swap_in(tmp, final)
        else:
            os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(tmp, ignore_errors=True)  # after a swap: the earlier folder


def _aside(final: Path) -> Path:
    return final.with_name(f".{final.name}.old")


def _swap_in(tmp: Path, final: Path) -> None:
    """`tmp` becomes `final`, and the earlier `final` is left at `tmp` (to be removed)."""
    if _exchange(tmp, final):
        return
    aside = _aside(final)
    shutil.rmtree(aside, ignore_errors=True)
    os.replace(final, aside)
    os.replace(tmp, final)
    os.replace(aside, tmp)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2 RENAME_EXCHANGE); False where the system lacks it."""
    import ctypes
    import errno

    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _recover(final: Path) -> None:
    """Undo what an interrupted earlier call left beside `final`: an earlier folder set aside by the
    two-rename swap goes back (or away, once its replacement is in place), and the temporary folders
    of processes that no longer run are removed."""
    aside = _aside(final)
    if aside.is_dir():
        if final.exists():
            shutil.rmtree(aside, ignore_errors=True)
        else:
            os.replace(aside, final)
    for stale in final.parent.glob(f".{glob.escape(final.name)}.*{PARTIAL_SUFFIX}"):
        pid = stale.name[: -len(PARTIAL_SUFFIX)].rsplit(".", 1)[-1]
        if pid.isdigit() and not _running(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)


def _running(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _writable(folder: Path) -> bool:
    return os.access(folder, os.W_OK | os.X_OK)


def check_writable_parent(path: str | Path, flag: str) -> None:
    """UserError unless `path` could be created: its nearest existing ancestor is a folder this
    process may write in (checked before any work, so a read-only place fails in seconds)."""
    path = Path(path).expanduser()
    parent = path.parent if str(path.parent) else Path(".")
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise UserError(f"{flag} {path}: {parent} is a file, not a folder", f"give a {flag} path in a folder")
    if not _writable(parent):
        raise UserError(f"{flag} {path}: the folder {parent} is not writable", f"give a {flag} path you may write to")


def check_rewritable(path: str | Path, flag: str) -> None:
    """A file rewritten in place (a temp file beside it, then a rename) checked before any work: its
    folder must be writable (`ppsd profile add-* DIR` rewrites DIR/profile.json)."""
    path = Path(path).expanduser()
    if path.parent.is_dir() and not _writable(path.parent):
        raise UserError(f"{flag} {path.parent} is not writable (its {path.name} is rewritten in place)",
                        f"give {flag} a folder you may write to, or copy it somewhere you may")


def check_output_file(path: str | Path, flag: str) -> Path:
    """An output file's path checked before any work: not a folder, in a folder this process may write."""
    out = Path(path).expanduser()
    if out.is_dir():
        raise UserError(f"{flag} {path} is a folder", f"give {flag} a file path, e.g. {Path(path) / 'out.json'}")
    check_writable_parent(out, flag)
    return out


def check_output_folder(path: str | Path, flag: str, *, force: bool, marker: str, what: str) -> Path:
    """An output folder's path checked before any work (any model load): not a file, in a writable
    place, and, when it already holds something, replaced only with `--force` and only when it is a
    `what` (it holds `marker`); a folder of anything else is never replaced."""
    out = Path(path).expanduser()
    if out.exists() and not out.is_dir():
        raise UserError(f"{flag} {path} is a file", f"give {flag} a folder path (a new folder)")
    if out.is_dir() and any(out.iterdir()):
        if not (out / marker).is_file():
            raise UserError(f"{flag} {path} holds files that are not a {what}; ppsd does not replace them",
                            f"give {flag} a new or empty folder")
        if not force:
            raise UserError(f"{flag} {path} already holds a {what}",
                            f"give {flag} a new folder, or add --force to replace it (the earlier one stays "
                            "until the new one is complete)")
    check_writable_parent(out, flag)
    return out


def display_path(path) -> str:
    """A path as result files record it: relative to the project root when inside it (so a committed
    validation folder names `examples/...`, not this machine's checkout), else absolute."""
    full = Path(path).expanduser().resolve()
    try:
        return str(full.relative_to(PROJECT_ROOT))
    except ValueError:
        return str(full)
