"""Tools for reviewing rule sets: list, show, validate, diff, explain, schema.

The core of ``compliance rules ...``: each module computes a typed, frozen
result and renders it as text or as a JSON-ready dict; the Click layer in
``compliance.cli.rules`` only parses options and prints. Every JSON document
carries ``schema_version`` (:data:`JSON_SCHEMA_VERSION`).
"""

JSON_SCHEMA_VERSION = 1
"""Version of the JSON documents ``compliance rules ... --format json`` prints."""
