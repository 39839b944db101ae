"""Parses Prometheus text from stdin with the reference parser (PyPI `prometheus-client`)
and prints its families as JSON on stdout, for tests/metrics.rs. Text the parser refuses
makes it exit non-zero with the parser's error."""

import json
import math
import sys

from prometheus_client.parser import text_string_to_metric_families


def number(value):
    # JSON has no infinities or NaN.
    return str(value) if math.isinf(value) or math.isnan(value) else value


families = [
    {
        "name": family.name,
        "type": family.type,
        "samples": [
            {"name": s.name, "labels": s.labels, "value": number(s.value)}
            for s in family.samples
        ],
    }
    for family in text_string_to_metric_families(sys.stdin.read())
]
json.dump(families, sys.stdout)
