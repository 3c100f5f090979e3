"""`ppsd profile upgrade DIR [--out DIR2] [--force]`: a profile folder of an older schema version written
as this one (`schema.upgrade`: the defaults of `schema.UPGRADE_DEFAULTS` filled where absent), torch-free.
Loading upgrades in memory anyway; this writes it down, so the file says what every reader assumes."""

from __future__ import annotations

import shutil
from pathlib import Path

from ppsd.errors import UserError
from ppsd.paths import atomic_dir, atomic_write_json
import ppsd.profile.schema as schema
from ppsd.profile.files import PROFILE_FILE
from ppsd.profile.folder import load_profile, read_meta


def upgrade_folder(src: str | Path, out: str | Path | None = None, force: bool = False) -> tuple[Path, int, list[str]]:
    """Write `src` upgraded: its profile.json in place (atomically), or the whole folder at `out` (a new
    folder; an existing profile folder there only with `force`), each read back before it replaces
    anything. Returns (the folder written, the version it had, the defaults filled). A corrupt profile is
    refused (UserError) before anything is written."""
    src = Path(src)
    raw = read_meta(src)
    version, filled = raw["schema_version"], schema.absent_defaults(raw)
    profile = load_profile(src)  # every value and file checked; its meta is the upgraded profile.json
    meta = dict(profile.meta)
    if out is None or Path(out).resolve() == src.resolve():
        if version != schema.SCHEMA_VERSION:
            atomic_write_json(src / PROFILE_FILE, meta)
            load_profile(src)
        return src, version, filled
    out = Path(out)
    _check_out(out, force)
    acc = meta.get("acceptance")
    if isinstance(acc, dict) and acc.get("dir") and not Path(acc["dir"]).is_absolute():
        meta["acceptance"] = {**acc, "dir": str(profile.acceptance_dir.resolve())}  # still found from `out`
    with atomic_dir(out) as tmp:
        for item in src.iterdir():
            if item.name != PROFILE_FILE and item.is_file():
                shutil.copy2(item, tmp / item.name)
        atomic_write_json(tmp / PROFILE_FILE, meta)
        load_profile(tmp)
    return out, version, filled


def _check_out(out: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file", "give a folder path for the upgraded profile")
    if out.exists() and not (out / PROFILE_FILE).exists() and any(out.iterdir()):
        raise UserError(f"--out {out} exists and is not a profile folder", "give a new folder")
    if out.exists() and (out / PROFILE_FILE).exists() and not force:
        raise UserError(f"--out {out} already holds a profile", "give a new folder, or --force to replace it")


def run_upgrade(args) -> int:
    folder, version, filled = upgrade_folder(args.dir, args.out, args.force)
    if version == schema.SCHEMA_VERSION:
        copied = "" if folder == Path(args.dir) else f", copied from {args.dir}"
        print(f"{folder}: at schema {version} already{copied}")
    else:
        print(f"{folder}: schema {version} -> {schema.SCHEMA_VERSION} (prices unchanged; defaults filled: "
              f"{', '.join(filled) or 'none needed'})")
    return 0


def register_upgrade(sub) -> None:
    """`ppsd profile upgrade` on `ppsd profile`'s subcommands."""
    p = sub.add_parser("upgrade", help=f"write a profile of an older schema version as schema {schema.SCHEMA_VERSION}",
                       description="Rewrite DIR's profile.json at this schema version (atomically), or write the "
                                   "upgraded folder to --out. Prices do not change: the defaults filled are what "
                                   "every reader assumed for the absent fields (docs/contracts.md, Profile folder).")
    p.add_argument("dir", help="profile folder")
    p.add_argument("--out", default=None, metavar="DIR2", help="write the upgraded folder here instead (new folder)")
    p.add_argument("--force", action="store_true", help="with --out: replace a profile folder already there")
    p.set_defaults(func=run_upgrade)
