"""Where memrepro's own files are, the same in a checkout and in an installed wheel."""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
# The Hydra configs ship inside the package (pyproject package-data); in a checkout memrepro/conf links to conf/.
CONFIG_DIR = PACKAGE_DIR / "conf"
