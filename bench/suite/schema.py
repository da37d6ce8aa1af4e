"""Apply ``manifest.schema.json`` (JSON Schema 2020-12) and turn its errors into one line each.

:func:`schema_problems` validates a parsed document with :mod:`jsonschema` and returns one
:class:`SchemaProblem` per wrong field: the JSON path of the field and a short message. jsonschema's
own messages are rephrased where they would not name the field: a missing or unknown property is
reported at the property's path, and a ``oneOf``/``anyOf`` that nothing matches is reported for the
alternative the value was meant to be (the one whose type it has, or the one object form whose
key it uses: ``buffer``/``scalar``/``local``, ``csr``/``ell``...), or as the list of those keys when
it uses none or several.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
from jsonschema.exceptions import ValidationError

SCHEMA_PATH = Path(__file__).with_name("manifest.schema.json")

JsonPath = tuple[str | int, ...]

_TYPE_NAMES = {"object": "an object", "array": "a list", "string": "a string", "number": "a number",
               "integer": "an integer", "boolean": "true or false", "null": "null"}


@dataclass(frozen=True)
class SchemaProblem:
    """One schema violation: where (a JSON path) and what."""

    path: JsonPath
    message: str


@functools.lru_cache(maxsize=1)
def validator() -> jsonschema.protocols.Validator:
    """The validator of ``manifest.schema.json`` (the class its ``$schema`` declares)."""
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def schema_problems(doc: Any) -> list[SchemaProblem]:
    """Every schema violation of ``doc``, each once, ordered by path."""
    out: dict[tuple[JsonPath, str], SchemaProblem] = {}
    for err in validator().iter_errors(doc):
        for p in _explain(err):
            out.setdefault((p.path, p.message), p)
    return sorted(out.values(), key=lambda p: _sort_key(p.path))


def _sort_key(path: JsonPath) -> tuple[tuple[int, int, str], ...]:
    return tuple((0, x, "") if isinstance(x, int) else (1, 0, x) for x in path)


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _types(value: Any) -> str:
    names = [value] if isinstance(value, str) else list(value)
    return " or ".join(_TYPE_NAMES.get(n, n) for n in names)


def _value(err: ValidationError) -> Any:
    """The value of the schema keyword that failed (``required``'s list, ``maxItems``' number...)."""
    return err.validator_value


def _subschema(err: ValidationError) -> Mapping[str, Any]:
    """The schema object holding the keyword that failed."""
    return err.schema if isinstance(err.schema, Mapping) else {}


def _explain(err: ValidationError) -> Iterator[SchemaProblem]:
    """The one-line problems one jsonschema error stands for."""
    path: JsonPath = tuple(err.absolute_path)
    kind, value = err.validator, _value(err)
    inst: Any = err.instance
    if kind in ("oneOf", "anyOf") and err.context:
        yield from _explain_alternatives(err)
    elif kind == "required" and isinstance(inst, dict):
        for name in value:
            if name not in inst:
                yield SchemaProblem((*path, name), "missing field")
    elif kind == "additionalProperties" and isinstance(inst, dict) and value is False:
        allowed = list(_subschema(err).get("properties", {}))
        for name in inst:
            if name not in allowed:
                yield SchemaProblem((*path, name), f"unknown field (allowed: {', '.join(allowed)})")
    elif kind == "pattern" and "propertyNames" in err.absolute_schema_path:
        yield SchemaProblem((*path, str(inst)), f"not a valid name (must match {value})")
    elif kind == "type":
        yield SchemaProblem(path, f"must be {_types(value)}, got {_short(inst)}")
    elif kind == "const":
        yield SchemaProblem(path, f"unsupported value {_short(inst)} (expected {_short(value)})")
    elif kind == "enum":
        yield SchemaProblem(path, f"{_short(inst)} is not one of {', '.join(json.dumps(v) for v in value)}")
    elif kind == "pattern":
        what = _subschema(err).get("description")
        yield SchemaProblem(path, f"{_short(inst)} is not {what}" if what else f"{_short(inst)} does not match {value}")
    elif kind in ("minItems", "minLength"):
        yield SchemaProblem(path, "must be non-empty" if value == 1 else
                            f"must have at least {value} {'items' if kind == 'minItems' else 'characters'}")
    elif kind in ("maxItems", "maxLength"):
        yield SchemaProblem(path, f"must have at most {value} {'items' if kind == 'maxItems' else 'characters'}, "
                            f"got {len(inst)}")
    elif kind == "minimum":
        yield SchemaProblem(path, f"must be at least {value}, got {_short(inst)}")
    else:
        yield SchemaProblem(path, err.message)


def _branches(err: ValidationError) -> dict[int, list[ValidationError]]:
    """The errors of each alternative of a failed oneOf/anyOf, by alternative index."""
    out: dict[int, list[ValidationError]] = {i: [] for i in range(len(_value(err)))}
    for sub in err.context or ():
        out[int(sub.relative_schema_path[0])].append(sub)
    return out


def _type_mismatch(errors: Iterable[ValidationError], path: JsonPath) -> bool:
    """Whether an alternative failed because the value at ``path`` does not have its type."""
    for e in errors:
        if tuple(e.absolute_path) != path:
            continue
        if e.validator == "type":
            return True
        if e.validator in ("oneOf", "anyOf") and e.context and all(
                _type_mismatch(errs, path) for errs in _branches(e).values()):
            return True
    return False


def _mismatched_types(errors: Iterable[ValidationError], path: JsonPath) -> list[str]:
    out: list[str] = []
    for e in errors:
        if tuple(e.absolute_path) != path:
            continue
        if e.validator == "type":
            out += [_value(e)] if isinstance(_value(e), str) else list(_value(e))
        elif e.validator in ("oneOf", "anyOf") and e.context:
            for errs in _branches(e).values():
                out += _mismatched_types(errs, path)
    return out


def _explain_alternatives(err: ValidationError) -> Iterator[SchemaProblem]:
    path: JsonPath = tuple(err.absolute_path)
    inst = err.instance
    branches = _branches(err)
    schemas: list[Any] = list(_value(err))
    fitting = [i for i, errs in branches.items() if not _type_mismatch(errs, path)]
    if not fitting:                      # the value has none of the allowed types
        types = list(dict.fromkeys(_mismatched_types(err.context or (), path)))
        yield SchemaProblem(path, f"must be {_types(types)}, got {_short(inst)}")
        return
    if isinstance(inst, dict):
        # object forms tell themselves apart by a key of their own (buffer / scalar / local, csr / ell ...)
        own = _own_keys(schemas)
        forms = [i for i in fitting if own.get(i)]
        if len(forms) == 1:
            fitting = forms
        elif forms:
            keys = {i: _first_required(schemas[i], own[i]) for i in forms}
            claimed = [i for i in forms if keys[i] in inst]
            if len(claimed) != 1:
                yield SchemaProblem(path, f"needs exactly one of {', '.join(map(repr, keys.values()))} "
                                    f"(found: {', '.join(map(str, inst)) or 'none'})")
                return
            fitting = claimed
    if len(fitting) == 1:
        for sub in branches[fitting[0]]:
            yield from _explain(sub)
        return
    yield SchemaProblem(path, f"{_short(inst)} does not fit any allowed form"
                        + (f" ({_subschema(err)['description']})" if "description" in _subschema(err) else ""))


def _own_keys(schemas: list[Any]) -> dict[int, set[str]]:
    """For each object alternative, the properties no other alternative has."""
    props = {i: set(s.get("properties", {})) for i, s in enumerate(schemas) if isinstance(s, dict)}
    return {i: p - set().union(*(q for j, q in props.items() if j != i)) for i, p in props.items()}


def _first_required(schema: dict[str, Any], own: set[str]) -> str:
    """The key naming an object alternative: its first required own key."""
    for name in schema.get("required", ()):
        if name in own:
            return str(name)
    return sorted(own)[0]
