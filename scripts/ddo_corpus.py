"""Write DDO's real report payloads into tests/data/ddo/, from DDO's own functions on the CPU.

    pip install --no-deps --target /tmp/ddo-site diffusers_dynamic_offloader-0.1.0rc2-py3-none-any.whl
    PYTHONPATH=.:/tmp/ddo-site python scripts/ddo_corpus.py

Each file is named ``ddo-<version>-<route>.<case>.json`` after the DDO version that wrote it and
holds ``metrics.as_dict()`` as JSON. The payloads a CPU machine cannot produce (a release that
ran, a detachment that copied, a completed native trim) are written by hand from DDO's source and
marked ``.handwritten-from-source`` in their names; this script leaves them alone. Every payload
is checked against ddo_hooks' models of DDO's shape before it is written.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support.ddo_payloads import CORPUS, ddo_version, real_payloads  # noqa: E402

from ddo_hooks import parse_report  # noqa: E402


def main() -> int:
    version = ddo_version()
    if version is None:
        print("diffusers-dynamic-offloader is not importable: put it on PYTHONPATH", file=sys.stderr)
        return 1
    CORPUS.mkdir(parents=True, exist_ok=True)
    for name, payload in real_payloads().items():
        parse_report(payload)
        path = CORPUS / f"ddo-{version}-{name}.json"
        path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        print(path.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
