"""The detector registry (rules/registry.py) agrees with schemas/rule.schema.json: the same kinds,
the same parameter names, the same defaults, the outputs the schema documents. A new detector
or a changed default in one place without the other fails here."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from trainwreck.engine import detectors as det
from trainwreck.rules.registry import DETECTORS, EVENTS, SERIES, SERIES_PAIR

ROOT = Path(__file__).resolve().parents[1]


def schema_detectors() -> dict[str, Any]:
    schema = json.loads((ROOT / "schemas" / "rule.schema.json").read_text(encoding="utf-8"))
    return schema["properties"]["detectors"]["additionalProperties"]["properties"]


def test_the_registry_and_the_schema_name_the_same_kinds() -> None:
    assert sorted(DETECTORS) == sorted(schema_detectors())


@pytest.mark.parametrize("kind", sorted(schema_detectors()))
def test_parameters_and_defaults_match_the_schema(kind: str) -> None:
    declared = schema_detectors()[kind]
    detector = DETECTORS[kind]
    properties = declared["properties"]
    assert sorted(detector.parameters) == sorted(properties)
    with_default = {name: spec["default"] for name, spec in properties.items() if "default" in spec}
    assert detector.defaults == with_default  # 0 == 0.0: the numbers, not their spelling
    for name, value in detector.defaults.items():
        assert type(value) is type(with_default[name]) or {
            type(value),
            type(with_default[name]),
        } == {
            int,
            float,
        }, name
    # Whatever the schema requires is a reference or a parameter without a default.
    assert set(declared.get("required", [])) <= {*detector.references, *detector.required}
    assert not set(detector.references) & set(detector.defaults)


@pytest.mark.parametrize("kind", sorted(schema_detectors()))
def test_the_schema_documents_every_output(kind: str) -> None:
    description = schema_detectors()[kind]["description"]
    documented = description.split("Outputs:", 1)[1]
    for output in DETECTORS[kind].outputs:
        assert re.search(rf"\b{output}\b", documented), (kind, output)


def test_references_fit_the_inputs() -> None:
    for detector in DETECTORS.values():
        expected = {SERIES: ("series",), SERIES_PAIR: ("series", "with"), EVENTS: ("a", "b")}
        assert detector.references == expected[detector.inputs], detector.kind


def test_every_kind_has_its_function_in_the_engine() -> None:
    assert set(det.FUNCTIONS) == set(DETECTORS)
    assert all(callable(function) for function in det.FUNCTIONS.values())


def test_event_detectors_return_events_and_rank_detectors_name_a_rank() -> None:
    """A rising series with one outlying rank: every detector flagged `names_rank` names it, and
    every detector flagged `events` returns its points as events."""
    points: dict[Any, det.Points] = {}
    for rank in range(4):
        values = [10.0] * 40
        if rank == 2:
            values = [10.0 + i for i in range(40)]
        n = len(values)
        zeros = np.zeros(n, dtype=np.int64)
        points[rank] = det.Points(
            np.asarray(values), np.arange(n, dtype=float), np.full(n, np.nan), zeros, zeros, zeros
        )
    overrides = {"threshold": {"above": 30.0}}
    fired = set()
    for detector in DETECTORS.values():
        if detector.inputs != SERIES:
            continue
        settings = detector.settings({**overrides.get(detector.kind, {}), "series": "s"})
        result = det.FUNCTIONS[detector.kind](points, settings)
        if result.fired:
            fired.add(detector.kind)
        if detector.names_rank and result.fired:
            assert result.rank == 2, detector.kind
        if detector.events and result.fired:
            assert result.events, detector.kind
    assert {"drift", "rank_outlier", "threshold"} <= fired
