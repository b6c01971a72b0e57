"""Short names for runs shown side by side: the settings that tell a run apart from its neighbours, never a hash.

``compare``, the sweep summary, the leaderboard and the report name a run by what differs between the runs on the
same page (``alpha=0.5, tau=0.2``), read from each run's settings as its run id hashes them; a run alone is named
by its retriever and encoder. Only when two runs have identical settings (the same run computed twice, or runs
that differ in a setting that changes no result, such as the engine) does the run id's prefix join the name.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from memrepro.limits import MAX_LABEL

_MISSING = object()


def flat_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """A run's settings (:attr:`memrepro.tables.runs.Run.settings`) by dotted path, ``_target_`` keys left out
    (the retriever's name already says which code ran)."""
    flat: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        for key, value in node.items():
            if isinstance(value, Mapping) and value:
                walk(value, f"{prefix}{key}.")
            elif key != "_target_":
                flat[f"{prefix}{key}"] = value

    walk(settings, "")
    return flat


def differing(flat: Sequence[Mapping[str, Any]]) -> list[str]:
    """The paths whose value is not the same in every mapping (absent counts as a value), in first-seen order."""
    from memrepro.tables.runs import same_setting

    paths = list(dict.fromkeys(path for settings in flat for path in settings))
    return [path for path in paths
            if any(not _same(settings.get(path, _MISSING), flat[0].get(path, _MISSING), same_setting)
                   for settings in flat[1:])]


def _same(a: Any, b: Any, same_setting) -> bool:
    if a is _MISSING or b is _MISSING:
        return a is b
    return same_setting(a, b)


def short_paths(paths: Sequence[str]) -> dict[str, str]:
    """Each path by its shortest dotted suffix that no other path shares (``retriever.gate.tau`` -> ``tau``);
    a top-level group keeps its name (``encoder.model`` -> ``encoder``, ``dataset.seeds`` -> ``seeds``)."""
    names: dict[str, str] = {}
    for path in paths:
        parts = path.split(".")
        for depth in range(1, len(parts) + 1):
            suffix = ".".join(parts[-depth:])
            if not any(other != path and (other == suffix or other.endswith("." + suffix)) for other in paths):
                break
        names[path] = "encoder" if path in ("encoder.model", "encoder.name") else suffix
    return names


def value_text(value: Any) -> str:
    """A setting's value as a label shows it: ``0.5``, ``true``, ``[7,11]``, ``-`` for absent."""
    if value is _MISSING or value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:g}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(value_text(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{value_text(v)}" for k, v in value.items()) + "}"
    text = str(value)
    return text.rsplit("/", 1)[-1] if "/" in text else text  # a model's hub path by its name


def distinguishing(runs: Sequence[Any]) -> list[dict[str, str]]:
    """Per run, ``{short name: value text}`` of the settings that differ between ``runs`` (empty when they are all
    the same or there is one run). When retrievers differ, the retriever's name is the first setting, and a
    retriever's own keys are compared only among the runs of that retriever (a different retriever differs in most
    of them)."""
    flat = [{"retriever": run.retriever_name, **flat_settings(run.settings)} for run in runs]
    if len(runs) < 2:
        return [{} for _ in runs]
    paths = differing(flat)
    chosen: list[list[str]] = [paths] * len(runs)
    if "retriever" in paths:
        shared = ["retriever", *(p for p in paths if not p.startswith("retriever."))]
        groups: dict[str, list[int]] = {}
        for i, settings in enumerate(flat):
            groups.setdefault(settings["retriever"], []).append(i)
        for members in groups.values():
            own = [p for p in differing([flat[i] for i in members]) if p.startswith("retriever.")]
            for i in members:
                chosen[i] = shared + own
    out = []
    for settings, paths in zip(flat, chosen):
        names = short_paths(paths)
        out.append({names[path]: value_text(settings.get(path, _MISSING)) for path in paths})
    return out


def labels(runs: Sequence[Any], max_len: int = MAX_LABEL) -> list[str]:
    """One short label per run (at most ``max_len`` characters, cut with ``…``), unique among ``runs``: the
    differing settings as ``name=value`` joined by ``, ``; a lone run is ``retriever (encoder)``."""
    if not runs:
        return []
    parts = distinguishing(runs)
    out = []
    for run, differ in zip(runs, parts):
        if not differ:
            text = f"{run.retriever_name} ({run.encoder_label})"
        else:
            retriever = differ.pop("retriever", None)
            settings = ", ".join(f"{name}={value}" for name, value in differ.items())
            text = ", ".join(t for t in (retriever, settings) if t)
        out.append(text)
    short = [shorten(text, max_len) for text in out]
    # the same settings (or the same cut label) twice: the run id's prefix tells them apart
    return [shorten(text, max_len - 11) + f" [{run.folder.name[:8]}]" if short.count(cut) > 1 else cut
            for text, cut, run in zip(out, short, runs)]


def shorten(text: str, max_len: int = MAX_LABEL) -> str:
    """``text`` cut to ``max_len`` characters with a closing ``…`` (unchanged when it fits)."""
    return text if len(text) <= max_len else text[:max_len - 1].rstrip(", ") + "…"
