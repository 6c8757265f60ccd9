"""scripts/gpu_check.sh refuses bad arguments, and a host without a GPU, with one line before any work.

    TORCH_TESTS_ON_HOST=1 IMAGE_UNDER_TEST=none python -m pytest tests/trainer/test_gpu_check.py
(On a GPU machine the script itself is the test: docs/training.md.)
"""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.tier("full")

BAD_ARGUMENTS = [
    ("--steps 10", "--steps must be a whole number of at least 20, not '10'"),
    ("--steps many", "--steps must be a whole number of at least 20, not 'many'"),
    ("--batch-size 0", "--batch-size must be a positive whole number, not '0'"),
    ("--steps", "--steps needs a value (see --help)"),
    ("--workdir /no/such/dir", "--workdir /no/such/dir is not a directory"),
    ("--fast", "unknown argument '--fast' (see --help)"),
]


@pytest.mark.parametrize(("arguments", "message"), BAD_ARGUMENTS, ids=[arguments for arguments, _ in BAD_ARGUMENTS])
def test_bad_arguments_get_one_line(torch_host, scripts_dir, arguments, message):
    result = torch_host.run(f"bash {scripts_dir}/gpu_check.sh {arguments}")
    assert result.rc == 2 and result.stdout == "", result.stdout + result.stderr
    assert result.stderr.strip().splitlines() == [f"gpu_check.sh: error: {message}"]


def test_help_names_every_option(torch_host, scripts_dir):
    result = torch_host.run(f"bash {scripts_dir}/gpu_check.sh --help")
    assert result.rc == 0
    for option in ("--steps", "--batch-size", "--skip-tests", "--workdir"):
        assert option in result.stdout


def test_a_host_without_a_gpu_is_told_so_in_one_line(torch_host, scripts_dir):
    if torch_host.run("timeout 60 python3 -c 'import torch, sys; sys.exit(torch.cuda.is_available())'").rc != 0:
        pytest.skip("a GPU is visible here: the script would run for minutes")
    result = torch_host.run(f"timeout 60 bash {scripts_dir}/gpu_check.sh --skip-tests")
    assert result.rc == 2, result.stdout + result.stderr
    assert result.stderr.strip().splitlines() == [
        "gpu_check.sh: error: torch sees no CUDA GPU on this host; run this script on a GPU machine"]
