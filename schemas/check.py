#!/usr/bin/env python3
"""Validate wirespeed JSON documents against the schemas in this directory.

    python3 schemas/check.py DOC.json ...     each document against the schema its "schema" field names
    wirespeed recv 7148 --once --json | python3 schemas/check.py -
    python3 schemas/check.py --schemas         every schema against the JSON Schema 2020-12 meta-schema,
                                               and every $ref in them resolves

One line per problem: the document, its schema id, the JSON path and what is wrong. Exit code 0
when all are valid, 1 when one is not, 2 for bad usage (an unreadable file, no "schema" field, an
id without a schema file). Needs the Python package jsonschema (4.18 or later).
"""
import json
import sys
from pathlib import Path

try:
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource
except ImportError:  # pragma: no cover
    sys.exit("check.py: the Python package jsonschema (4.18 or later) is needed: pip install jsonschema")

HERE = Path(__file__).resolve().parent


def schema_file(doc_id):
    """wirespeed.bench.max/1 -> wirespeed.bench.max-1.schema.json"""
    return HERE / (doc_id.replace("/", "-") + ".schema.json")


def load_all():
    schemas = {}
    for p in sorted(HERE.glob("*.schema.json")):
        schemas[p.name] = json.loads(p.read_text())
    registry = Registry().with_resources(
        (s["$id"], Resource.from_contents(s)) for s in schemas.values()
    )
    return schemas, registry


def where(path):
    return "/" + "/".join(str(p) for p in path)


def refs(x):
    if isinstance(x, dict):
        for k, v in x.items():
            if k == "$ref" and isinstance(v, str):
                yield v
            else:
                yield from refs(v)
    elif isinstance(x, list):
        for v in x:
            yield from refs(v)


def check_schemas():
    schemas, registry = load_all()
    bad = 0
    for name, s in schemas.items():
        for e in Draft202012Validator(Draft202012Validator.META_SCHEMA).iter_errors(s):
            print(f"{name}: not a valid JSON Schema at {where(e.absolute_path)}: {e.message}")
            bad += 1
        if s.get("$id", "").rsplit("/", 1)[-1] != name:
            print(f"{name}: $id {s.get('$id')!r} does not end in the file's name")
            bad += 1
        resolver = registry.resolver(base_uri=s["$id"])
        for r in sorted(set(refs(s))):
            try:
                resolver.lookup(r)
            except Exception as e:  # noqa: BLE001 - any failure to resolve is the finding
                print(f"{name}: $ref {r} does not resolve: {e}")
                bad += 1
    print(f"{len(schemas)} schemas, {bad} problems")
    return 1 if bad else 0


def check_docs(paths):
    schemas, registry = load_all()
    bad = 0
    for path in paths:
        label = "stdin" if path == "-" else path
        try:
            text = sys.stdin.read() if path == "-" else Path(path).read_text()
            doc = json.loads(text)
        except (OSError, ValueError) as e:
            print(f"{label}: cannot read a JSON document: {e}")
            return 2
        doc_id = doc.get("schema") if isinstance(doc, dict) else None
        if not isinstance(doc_id, str):
            print(f"{label}: no \"schema\" field naming the document's kind")
            return 2
        f = schema_file(doc_id)
        if f.name not in schemas:
            print(f"{label}: {doc_id} has no schema file ({f.name})")
            return 2
        v = Draft202012Validator(schemas[f.name], registry=registry)
        errors = sorted(v.iter_errors(doc), key=lambda e: list(e.absolute_path))
        for e in errors:
            # the deepest cause says most: a oneOf/anyOf names its branches' errors in context
            print(f"{label}: {doc_id} at {where(e.absolute_path)}: {e.message[:300]}")
            for c in sorted(e.context or [], key=lambda c: list(c.absolute_path))[:6]:
                print(f"{label}:   because at {where(c.absolute_path)}: {c.message[:300]}")
        bad += bool(errors)
        if not errors:
            print(f"{label}: {doc_id} valid")
    return 1 if bad else 0


def main(argv):
    if argv == ["--schemas"]:
        return check_schemas()
    if not argv or any(a.startswith("--") for a in argv):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    return check_docs(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
