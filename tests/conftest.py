"""Shared test configuration: CPU by default, `gpu`-marked tests only on a CUDA machine."""

import os

# Nothing in the suite may reach a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
