"""Shared test configuration: CPU by default, `gpu`-marked tests only on a CUDA machine."""

import os

# Nothing in the suite may reach a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# Named by the fuzz tests' !!python tags, which must never import it: not even for doctests.
collect_ignore = ["fuzz_sentinel.py"]
