"""The RF-Mem settings the tables and figures sweep: each one's path in the retriever config, its short name (a
column of a sweep's frame, a key of a figure's ``vary``) and its label (an axis, a legend), read from the field's
declaration (``param(..., label=...)`` in ``memrepro/retrievers/rfmem/params.py``)."""

from __future__ import annotations

from memrepro.retrievers.rfmem.params import GateParams, RecollectionParams
from memrepro.parameters import declared_label

# path -> (the node's schema, its field); in the order a table row names them
_DECLARED = {"recollection.k": (RecollectionParams, "k"), "recollection.beam": (RecollectionParams, "beam"),
             "recollection.fanout": (RecollectionParams, "fanout"), "recollection.alpha": (RecollectionParams, "alpha"),
             "gate.tau": (GateParams, "tau")}
SHORT: dict[str, str] = {path: name for path, (_, name) in _DECLARED.items()}  # path -> short name
PATH: dict[str, str] = {name: path for path, name in SHORT.items()}  # short name -> path
LABEL: dict[str, str] = {name: declared_label(schema, name) for schema, name in _DECLARED.values()}  # short -> label
