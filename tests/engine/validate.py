#!/usr/bin/env python3
"""Checks probe output against resources/probe-protocol.schema.json (tests/tst_engine.cpp).

    validate.py SCHEMA LINES_FILE    # every line of LINES_FILE is one protocol event
Prints one line per invalid event and exits 1 if there is any; exits 3 without jsonschema.
"""
import json
import sys

try:
    import jsonschema
except ImportError:
    print("jsonschema is not installed", file=sys.stderr)
    sys.exit(3)

schema = json.load(open(sys.argv[1]))
validator = jsonschema.Draft202012Validator(schema)
bad = 0
for n, line in enumerate(open(sys.argv[2]), 1):
    line = line.strip()
    if not line:
        continue
    errors = sorted(validator.iter_errors(json.loads(line)), key=lambda e: e.path)
    if errors:
        bad += 1
        e = errors[0]
        print(f"line {n}: {'/'.join(map(str, e.absolute_path))}: {e.message[:200]}")
sys.exit(1 if bad else 0)
