"""Where memrepro's own files are, the same in a checkout and in an installed wheel, and the default of the
embedding and model cache."""

from __future__ import annotations

import os
from pathlib import Path

from memrepro.errors import EXIT_BAD_INPUT, MemreproError

PACKAGE_DIR = Path(__file__).resolve().parent
# The Hydra configs ship inside the package (pyproject package-data); in a checkout memrepro/conf links to conf/.
CONFIG_DIR = PACKAGE_DIR / "conf"
CACHE_DIR_ENV = "MEMREPRO_CACHE_DIR"


class NoCacheDirError(MemreproError):
    """Neither ``$MEMREPRO_CACHE_DIR`` nor a home directory says where the cache goes."""

    exit_code = EXIT_BAD_INPUT


def cache_dir() -> Path:
    """``$MEMREPRO_CACHE_DIR``, else ``~/.cache/memrepro`` (the home directory from ``$HOME`` or, when it is
    unset, the user's account); the config's ``paths.cache_dir`` defaults to it."""
    configured = os.environ.get(CACHE_DIR_ENV)
    if configured:
        return Path(configured).expanduser()
    try:
        return Path.home() / ".cache" / "memrepro"
    except RuntimeError:  # no $HOME and no account entry for this user (a bare container)
        raise NoCacheDirError(f"no home directory to keep the cache in ($HOME is unset and user {os.getuid()} has "
                              f"no account entry); set {CACHE_DIR_ENV}=<folder> (or HOME) and rerun") from None
