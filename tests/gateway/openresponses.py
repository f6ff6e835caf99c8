"""Validators of the Open Responses specification's schemas (tests/data/openresponses), by
component name or by a stream event's type."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

SPEC = Path(__file__).resolve().parents[1] / "data" / "openresponses" / "openapi.json"
_BASE = "urn:openresponses"


@functools.cache
def _doc() -> dict[str, Any]:
    return json.loads(SPEC.read_text())


@functools.cache
def _registry() -> Registry:
    resource = Resource.from_contents(_doc(), default_specification=DRAFT202012)
    return Registry().with_resource(_BASE, resource)


@functools.cache
def validator(component: str) -> Draft202012Validator:
    """A validator of one component schema, its references resolved in the document."""
    assert component in _doc()["components"]["schemas"], component
    ref = {"$ref": f"{_BASE}#/components/schemas/{component}"}
    return Draft202012Validator(ref, registry=_registry())


@functools.cache
def event_components() -> dict[str, str]:
    """A stream event's type -> the name of its schema."""
    out = {}
    for name, schema in _doc()["components"]["schemas"].items():
        kind = schema.get("properties", {}).get("type", {}).get("enum")
        if name.endswith("StreamingEvent") and kind:
            out[kind[0]] = name
    return out


def check(component: str, obj: Any) -> None:
    """Raise (with every violation listed) unless obj validates against the component."""
    errors = sorted(validator(component).iter_errors(obj), key=lambda e: list(e.path))
    assert not errors, f"{component}: " + "; ".join(
        f"{'/'.join(map(str, e.path))}: {e.message[:200]}" for e in errors[:5]
    )


def check_event(event: dict[str, Any]) -> None:
    """Validate a stream event against the schema of its type (an unknown type fails)."""
    kinds = event_components()
    assert event.get("type") in kinds, f"not an event type of the specification: {event}"
    check(kinds[event["type"]], event)
