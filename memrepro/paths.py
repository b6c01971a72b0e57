"""Where memrepro's files are: its own (the configs, the same in a checkout and in an installed wheel) and the
user's (data, results, kept runs, models, logs), which resolve from one project root, never from the current folder.

The project root is ``$MEMREPRO_HOME`` when set; else the checkout this package was imported from (the folder that
holds ``conf/`` next to ``memrepro/``, as after ``make install``); else the checkout that holds the current folder;
else the current folder itself, which the console script says in one line before it computes anything
(:func:`outside_notice`). Each folder can also be set on its own (``$MEMREPRO_RESULTS_DIR`` …, :data:`FOLDERS`).
The standard library only: the dispatcher and ``--help`` read this module before anything heavy is imported.
"""

from __future__ import annotations

import os
from pathlib import Path

from memrepro.errors import EXIT_BAD_INPUT, MemreproError

PACKAGE_DIR = Path(__file__).resolve().parent
# The Hydra configs ship inside the package (pyproject package-data); in a checkout memrepro/conf links to conf/.
CONFIG_DIR = PACKAGE_DIR / "conf"
HOME_ENV = "MEMREPRO_HOME"

# Each folder: the variable that sets it, and where it is when that is unset (under the project root, or ``~``).
FOLDERS: dict[str, tuple[str, str]] = {
    "data_dir": ("MEMREPRO_DATA_DIR", "data"),
    "results_dir": ("MEMREPRO_RESULTS_DIR", "results"),
    "kept_dir": ("MEMREPRO_KEPT_DIR", "results/kept"),  # committed copies of expensive runs (memrepro/runs/kept.py)
    "models_dir": ("MEMREPRO_MODELS_DIR", "models"),
    "log_dir": ("MEMREPRO_LOG_DIR", "outputs"),  # Hydra's output folders (the run.log of each command)
    "cache_dir": ("MEMREPRO_CACHE_DIR", "~/.cache/memrepro"),
}


class NoHomeError(MemreproError):
    """A folder whose default is under the home directory, and there is none."""

    exit_code = EXIT_BAD_INPUT


def is_checkout(folder: Path) -> bool:
    """A memrepro checkout: the configs and the package side by side."""
    return (folder / "conf" / "config.yaml").is_file() and (folder / "memrepro" / "__main__.py").is_file()


def project_root() -> tuple[Path, str | None]:
    """``(root, what it is)``: ``$MEMREPRO_HOME``, this package's checkout, the checkout around the current folder,
    or (what: None) the current folder when none of those exists."""
    home = os.environ.get(HOME_ENV)
    if home:
        return Path(home).expanduser().absolute(), f"${HOME_ENV}"
    if is_checkout(PACKAGE_DIR.parent):
        return PACKAGE_DIR.parent, "checkout"
    here = Path.cwd()
    for folder in (here, *here.parents):
        if is_checkout(folder):
            return folder, "checkout"
    return here, None


def folder_path(name: str) -> Path:
    """A folder of :data:`FOLDERS`: its variable when set (a relative value is read from the current folder, as
    any path a user types), else its default under the project root."""
    variable, default = FOLDERS[name]
    value = os.environ.get(variable)
    if value:
        return Path(value).expanduser()
    if default.startswith("~"):
        try:
            return Path(default).expanduser()
        except RuntimeError:  # no $HOME and no account entry for this user (a bare container)
            raise NoHomeError(f"no home directory for {default} ($HOME is unset and user {os.getuid()} has no "
                              f"account entry); set {variable}=<folder> (or HOME) and rerun") from None
    return project_root()[0] / default


def outside_notice() -> str | None:
    """The one line a command prints before it writes anything when no project root was found (None otherwise)."""
    root, what = project_root()
    if what is not None:
        return None
    unset = [FOLDERS[name][0] for name in ("results_dir", "models_dir", "log_dir") if not os.environ.get(
        FOLDERS[name][0])]
    if not unset:
        return None
    return (f"memrepro: not inside a memrepro checkout and ${HOME_ENV} is unset: results, kept runs, models and logs "
            f"go under {root}; set {HOME_ENV}=<folder> (or run from the checkout) to use another folder")


def in_project(path: str | os.PathLike[str]) -> str:
    """A path as rendered files name it: relative to the project root when under it (the same text on every
    clone), else as given."""
    try:
        return str(Path(os.path.abspath(path)).relative_to(project_root()[0]))
    except ValueError:
        return str(path)


def shown(path: str | os.PathLike[str]) -> str:
    """A path as messages print it: relative to the current folder when under it, else absolute."""
    absolute = Path(os.path.abspath(path))
    try:
        return str(absolute.relative_to(Path.cwd()))
    except ValueError:
        return str(absolute)
