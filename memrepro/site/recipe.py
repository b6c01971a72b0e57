"""What a run set, as the difference from the preset it is closest to: ``rfmem_personabench + alpha=0.5``.

For the dataset, encoder and retriever of a run, every preset of that config group (``conf/<group>/*.yaml``, as
Hydra composes it) with the same ``_target_`` is compared with the run's node, both without the settings that
change no result (as a run id sees them); the preset with the fewest differing settings is the run's, and those
settings are what its page lists. A node no preset builds (an external system scored with ``memrepro.evaluate``)
lists every setting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from memrepro.paths import CONFIG_DIR
from memrepro.tables.naming import value_text
from memrepro.tables.runs import same_setting

GROUPS = ("dataset", "encoder", "retriever")
_ABSENT = "(not set)"


def flatten(node: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Every leaf of a nested config by dotted path, ``_target_`` keys included (they say which code runs)."""
    flat: dict[str, Any] = {}
    for key, value in node.items():
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def measured(group: str, node: Mapping[str, Any]) -> dict[str, Any]:
    """``node`` of ``group`` without what changes no result, flattened."""
    from memrepro.runs.identity import semantic_config

    return flatten(semantic_config({group: dict(node)}).get(group) or {})


def preset_names(group: str) -> list[str]:
    return sorted(path.stem for path in (CONFIG_DIR / group).glob("*.yaml"))


class Presets:
    """The measured settings of the presets a report compares runs with, each composed once by Hydra (about 0.2 s
    apiece) when first asked for; None for a preset that does not compose alone."""

    def __init__(self, found: Mapping[tuple[str, str], dict[str, Any] | None] | None = None) -> None:
        self.found: dict[tuple[str, str], dict[str, Any] | None] = dict(found or {})  # (group, preset) -> settings

    def settings(self, group: str, name: str) -> dict[str, Any] | None:
        if (group, name) not in self.found:
            from omegaconf import OmegaConf

            from memrepro.experiments import composed_config

            try:
                node = OmegaConf.to_container(composed_config([f"{group}={name}"])[group], resolve=True)
                self.found[(group, name)] = measured(group, node)
            except Exception:  # noqa: BLE001 - a preset that needs more than its group cannot be a run's closest
                self.found[(group, name)] = None
        return self.found[(group, name)]


def all_presets() -> dict[tuple[str, str], dict[str, Any] | None]:
    """Every preset of every group, composed (a report does this in a worker process while it reads the runs, and
    hands the result to its :class:`Presets`)."""
    presets = Presets()
    for group in GROUPS:
        for name in preset_names(group):
            presets.settings(group, name)
    return presets.found


@dataclass(frozen=True)
class Difference:
    path: str
    value: str  # the run's
    default: str  # the preset's


@dataclass(frozen=True)
class GroupRecipe:
    group: str
    preset: str | None  # None: no preset builds this node
    differences: tuple[Difference, ...]

    def text(self) -> str:
        """``preset`` or ``preset + a=1, b=2`` (one line)."""
        changed = ", ".join(f"{d.path}={d.value}" for d in self.differences)
        if self.preset is None:
            return changed or "(no settings)"
        return f"{self.preset} + {changed}" if changed else self.preset


def closest(group: str, node: Mapping[str, Any], presets: Presets, name: str = "") -> GroupRecipe:
    """The preset of ``group`` closest to ``node`` and the settings that differ from it. ``name`` (the run's
    retriever or dataset name) picks the presets looked at first: those whose file name starts with it, or it with
    theirs (``rfmem_personabench`` for ``rfmem``, ``longmemeval`` for ``longmemeval_s``); the others are composed
    only when none of those builds the same ``_target_``."""
    own = measured(group, node)
    names = preset_names(group)
    family = [n for n in names if name and (n.startswith(name) or name.startswith(n))]
    best = _best(group, own, family, presets) or _best(group, own, [n for n in names if n not in family], presets)
    if best is None:
        return GroupRecipe(group, None, tuple(Difference(p, _text(v), "") for p, v in own.items()
                                              if p != "_target_"))
    return GroupRecipe(group, best[2], tuple(best[3]))


def _best(group: str, own: dict[str, Any], names: list[str],
          presets: Presets) -> tuple[int, int, str, list[Difference]] | None:
    best = None
    for name in names:
        settings = presets.settings(group, name)
        if settings is None or settings.get("_target_") != own.get("_target_"):
            continue
        differences = [Difference(path, _text(own.get(path, _ABSENT)), _text(settings.get(path, _ABSENT)))
                       for path in dict.fromkeys([*own, *settings])
                       if not (path in own and path in settings and same_setting(own[path], settings[path]))]
        candidate = (len(differences), len(name), name, differences)
        if best is None or candidate[:3] < best[:3]:
            best = candidate
    return best


def recipe(run: Any, presets: Presets) -> list[GroupRecipe]:
    """A run's dataset, encoder and retriever (:class:`memrepro.tables.runs.Run`)."""
    config = run.config
    return [closest("dataset", config.get("dataset") or {}, presets, run.dataset),
            closest("encoder", config.get("encoder") or {}, presets),
            closest("retriever", run.retriever, presets, run.retriever_name)]


def _text(value: Any) -> str:
    if value is _ABSENT:
        return _ABSENT
    if isinstance(value, str) and "." in value and value.count(".") >= 2 and " " not in value:
        return value.rsplit(".", 1)[-1]  # a _target_ by its class name
    return value_text(value)
