"""The config groups a command offers and their options, read from the files under ``conf/`` (no Hydra): what
``run --help`` lists, and which options of a group have a key another option lacks (an error names them).

An option is a YAML file of its group; the schema it is checked against is the first ``<name>_schema`` of its
defaults list, or that of the sibling option it extends (``rfmem_personabench`` names ``rfmem``). Schemas are not
options. The standard library and PyYAML only: ``--help`` reads this before anything heavy is imported.
"""

from __future__ import annotations

import dataclasses
import typing
from functools import lru_cache
from pathlib import Path

from memrepro.errors import KeyOfOtherOptionsError, UnknownNameError
from memrepro.parameters import unknown_field
from memrepro.paths import CONFIG_DIR

SCHEMA_SUFFIX = "_schema"  # a schema's name in Hydra's ConfigStore (memrepro/config.py GROUP_SCHEMAS)


@lru_cache(maxsize=None)
def _yaml(path: Path) -> dict:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(path, encoding="utf-8") as handle:
        document = yaml.load(handle, Loader=loader)
    return document if isinstance(document, dict) else {}


def options(group: str) -> list[str]:
    """The options of a config group (its YAML files), sorted."""
    return sorted(path.stem for path in (CONFIG_DIR / group).glob("*.yaml"))


def group_defaults(config_name: str = "config") -> dict[str, str | None]:
    """``{group: default option}`` of a command's config (``config``: run, ``train``, ``eval``), in its order;
    an optional group without a default maps to None."""
    out: dict[str, str | None] = {}
    for entry in _yaml(CONFIG_DIR / f"{config_name}.yaml").get("defaults", []):
        if not isinstance(entry, dict):
            continue
        for key, value in entry.items():
            key = key.removeprefix("optional ").strip()
            if key.startswith("override ") or "/" in key:
                continue
            out[key] = None if value is None else str(value)
    return out


def schema_of(group: str, option: str, seen: frozenset[str] = frozenset()) -> str | None:
    """The ConfigStore name of the schema an option is checked against (``rfmem_schema``), or None."""
    path = CONFIG_DIR / group / f"{option}.yaml"
    if not path.is_file() or option in seen:
        return None
    for entry in _yaml(path).get("defaults", []):
        if isinstance(entry, str) and entry.endswith(SCHEMA_SUFFIX):
            return entry
        if isinstance(entry, str) and entry != "_self_" and "/" not in entry:
            return schema_of(group, entry, seen | {option})
        if isinstance(entry, str) and entry.startswith(f"/{group}/") and "@" in entry:  # /retriever/x@_here_
            return schema_of(group, entry[len(group) + 2:].split("@")[0], seen | {option})
    return None


def _field_at(schema: type, parts: list[str]) -> tuple[bool, bool]:
    """``(whether the dataclass schema has the nested field parts, whether that field is a block of keys)``."""
    fields = {spec.name for spec in dataclasses.fields(schema)}
    if parts[0] not in fields:
        return False, False
    hint = typing.get_type_hints(schema)[parts[0]]
    if len(parts) == 1:
        return True, dataclasses.is_dataclass(hint)
    return _field_at(hint, parts[1:]) if dataclasses.is_dataclass(hint) else (False, False)


def options_with_key(key: str, schemas: dict[str, type]) -> tuple[list[str], bool]:
    """``(the options of key's group (its first part) whose schema has the rest of key, whether it is a block of
    keys there)``: the options an unknown ``retriever.recollection`` belongs to. ``schemas``: the group's
    ``{schema name: dataclass}``. The options that name the schema themselves come first."""
    group, _, rest = key.partition(".")
    if not rest or not (CONFIG_DIR / group).is_dir():
        return [], False
    found_at = {name: _field_at(schema, rest.split(".")) for name, schema in schemas.items()}
    having = {name for name, (found, _) in found_at.items() if found}
    block = any(found_at[name][1] for name in having)
    found = [option for option in options(group) if schema_of(group, option) in having]

    def direct(option: str) -> bool:
        return any(entry in having for entry in _yaml(CONFIG_DIR / group / f"{option}.yaml").get("defaults", []))

    return sorted(found, key=lambda option: (not direct(option), option)), block


def unknown_config_key(key: str, schema: type) -> UnknownNameError:
    """``key`` is not a field of ``schema``, the dataclass of the config node it would sit in. A key that other
    options of its config group have (``retriever.recollection`` under ``retriever=dense``) names those options."""
    elsewhere, block = _options_with_key(key)
    return KeyOfOtherOptionsError(key, elsewhere, block) if elsewhere else unknown_field(key, schema)


def _options_with_key(key: str) -> tuple[list[str], bool]:
    """The options of ``key``'s config group that have it (``memrepro.options``); none for a key outside a group."""
    from memrepro.config import GROUP_SCHEMAS  # the schemas import Hydra: read only when a key is refused

    group = key.split(".")[0]
    return options_with_key(key, dict(GROUP_SCHEMAS[group])) if group in GROUP_SCHEMAS else ([], False)
