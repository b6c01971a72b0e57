"""The project's reference file is the spec's, unchanged, and parses."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from memrepro.reference import reference_numbers, reference_value


def test_reference_lookup() -> None:
    assert reference_value("convmemory.protocol.pooled_test_rows") == 4955
    with pytest.raises(KeyError, match="missing 'nope'"):
        reference_value("convmemory.nope")


def test_reference_matches_spec_file() -> None:
    spec = Path(__file__).resolve().parents[1] / ".." / "shared" / "specs" / "reference_numbers.yaml"
    if not spec.is_file():
        pytest.skip("spec folder not present")
    assert reference_numbers() == yaml.safe_load(spec.read_text())
