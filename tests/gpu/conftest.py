"""GPU tests: each scenario runs in a fresh Python process, so allocator state and CUDA
contexts are exactly what the scenario made. Run them on the GPU machine with
``scripts/gpu_session.sh`` (they are deselected elsewhere by ``-m 'not gpu'``)."""

import json
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")


@pytest.fixture
def run_fresh():
    """Run a snippet in a fresh interpreter; it must print one JSON object on its last line."""

    def run(code: str, timeout: float = 300) -> dict:
        proc = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout
        )
        if proc.returncode != 0:
            raise AssertionError(f"snippet failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        print(json.dumps(result, indent=1))  # the figures go into the session log
        return result

    return run


@pytest.fixture
def gpu_count() -> int:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    return torch.cuda.device_count()
