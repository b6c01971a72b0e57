"""The project's reference file is the spec's (its citations pointed at the docs), and parses."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from memrepro.reference import reference_numbers, reference_value


def test_reference_lookup() -> None:
    assert reference_value("convmemory.protocol.pooled_test_rows") == 4955
    with pytest.raises(KeyError, match="missing 'nope'"):
        reference_value("convmemory.nope")


# The spec cites its own protocol notes and local copies of the papers; the shipped file cites the docs page that
# now holds the notes and names the papers. Nothing else may differ: every number, key and other text is the spec's.
SPEC_CITATIONS = {
    "../shared/specs/protocols.md section 4": "docs/protocols.md#personamem-protocol",
    "../shared/specs/protocols.md section 1": "docs/protocols.md#locomo-splits",
    "../shared/papers/rfmem_paper.md": "the paper text, arXiv 2603.09250 (not shipped)",
    "../shared/papers/convmemory_v2_summary.md": "the publisher summary of ConvMemory v2 by Taiheng Pan (not shipped)",
}


def _cited_in_repo(node):
    """The spec's values with its outside citations replaced as SPEC_CITATIONS says (strings only)."""
    if isinstance(node, dict):
        return {key: _cited_in_repo(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_cited_in_repo(value) for value in node]
    if isinstance(node, str):
        for theirs, ours in SPEC_CITATIONS.items():
            node = node.replace(theirs, ours)
        assert "../shared" not in node, f"a spec citation with no mapping in SPEC_CITATIONS: {node!r}"
    return node


def test_reference_matches_spec_file() -> None:
    spec = Path(__file__).resolve().parents[1] / ".." / "shared" / "specs" / "reference_numbers.yaml"
    if not spec.is_file():
        pytest.skip("spec folder not present")
    text = spec.read_text()
    assert all(theirs in text for theirs in SPEC_CITATIONS), "the spec's citations changed: update SPEC_CITATIONS"
    assert reference_numbers() == _cited_in_repo(yaml.safe_load(text))
