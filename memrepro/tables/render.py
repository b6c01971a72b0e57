"""Write one table as Markdown, LaTeX (booktabs, best in bold) and CSV, atomically, into ``results/tables/``.

The table arrives as a frame of display strings plus a same-shaped boolean frame marking the cells to set in bold
(the best of our rows per column and block). Markdown bolds with ``**``; LaTeX goes through pandas'
``Styler.to_latex(hrules=True)`` (``\\toprule``/``\\midrule``/``\\bottomrule``, escaping by pandas, bold with
``\\textbf``); the CSV holds the same strings without emphasis, for spreadsheets and diffs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pandas as pd

from memrepro.files import write_text_atomic
from memrepro.tables import committed


def markdown(frame: pd.DataFrame, bold: pd.DataFrame | None = None) -> str:
    shown = frame.copy()
    if bold is not None:
        shown = shown.mask(bold.reindex_like(frame).fillna(False).astype(bool), "**" + frame.astype(str) + "**")
    # a "|" inside a header or cell (``|Δ|``) would split the Markdown column
    shown.columns = [str(c).replace("|", r"\|") for c in shown.columns]
    shown = shown.map(lambda v: v.replace("|", r"\|") if isinstance(v, str) else v)
    return shown.to_markdown(index=False, disable_numparse=True)  # keep the printed decimals


# pdflatex without extra packages has no glyphs for these; pandas escapes LaTeX specials but leaves Unicode alone
LATEX_SYMBOLS = {"—": "--", "−": "-", "Δ": r"$\Delta$", "→": r"$\rightarrow$", "≤": r"$\le$", "≥": r"$\ge$",
                 "±": r"$\pm$", "×": r"$\times$", "·": r"$\cdot$", "α": r"$\alpha$", "τ": r"$\tau$",
                 "≈": r"$\approx$", committed.MARK: r"$\ddagger$"}


def latex(frame: pd.DataFrame, bold: pd.DataFrame | None = None, caption: str | None = None) -> str:
    styler = frame.style.hide(axis="index")
    if bold is not None:
        flags = bold.reindex_like(frame).fillna(False).astype(bool)
        styler = styler.apply(lambda _: flags.map(lambda on: "textbf:--rwrap;" if on else ""), axis=None)
    styler = styler.format(escape="latex").format_index(escape="latex", axis=1)
    text = styler.to_latex(hrules=True, caption=caption, position_float="centering",
                           column_format="l" * frame.shape[1])
    for symbol, command in LATEX_SYMBOLS.items():
        text = text.replace(symbol, command)
    return text


def write_table(frame: pd.DataFrame, out_dir: Path, name: str, title: str, *, bold: pd.DataFrame | None = None,
                notes: Sequence[str] = (), keep_committed: bool = False,
                csv: pd.DataFrame | None = None) -> list[Path]:
    """``<name>.md`` (title, table, notes), ``<name>.tex`` and ``<name>.csv``; returns the paths written.

    ``keep_committed``: a cell the new rendering has no value for keeps the value of the table already in
    ``out_dir``, marked (:mod:`memrepro.tables.committed`), so a missing run never blanks a committed number.
    ``csv``: what the CSV holds when the shown ``frame`` abbreviates it (full texts that ``frame`` footnotes)."""
    paths = [out_dir / f"{name}.md", out_dir / f"{name}.tex", out_dir / f"{name}.csv"]
    if keep_committed:
        merged = committed.merge(frame, committed.read_committed(paths[2]))
        notes = [*notes, *committed.recomputed(out_dir, name, merged)]
        if merged.kept:
            frame, bold = merged.frame, merged.bold(bold)
            notes = [*notes, *committed.kept_notes(list(notes), committed.read_committed_notes(paths[0])),
                     committed.note(merged.kept)]
    notes_md = "".join(f"\n- {note}" for note in notes)
    notes_block = f"\n{notes_md.lstrip()}\n" if notes else ""
    write_text_atomic(paths[0], f"# {title}\n\n{markdown(frame, bold)}\n" + notes_block)
    write_text_atomic(paths[1], latex(frame, bold, caption=title))
    write_text_atomic(paths[2], (frame if csv is None else csv).to_csv(index=False))
    return paths
