"""What the doctor and benchmark tests share beyond tests/conftest.py: a guard for no-GPU behaviour.

    make test-image PYTEST_ARGS="tests/image/test_doctor.py tests/image/test_bench_allreduce.py"
    TORCH_TESTS_ON_HOST=1 .venv-test/bin/python -m pytest tests/image/test_doctor.py
"""
from __future__ import annotations

import pytest
import testinfra


@pytest.fixture(scope="module")
def without_gpu(torch_host: testinfra.host.Host) -> None:
    """Skips a test of how the tools behave without a GPU where the torch host has one (the GPU tests
    use `cuda_devices`, which skips the other way round)."""
    result = torch_host.run("timeout 60 python -c 'import torch; print(torch.cuda.device_count())'")
    assert result.rc == 0, result.stderr
    if int(result.stdout.strip()) > 0:
        pytest.skip("the torch host has a GPU; this test is about a machine without one")
