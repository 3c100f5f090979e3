"""What commands print for machines: `--json` output is one JSON document alone on stdout."""

from __future__ import annotations

import json
import sys


def print_json(obj) -> None:
    json.dump(obj, sys.stdout, indent=1)
    sys.stdout.write("\n")
