"""GPU checks: CUDA, bf16, the GPU's architecture in torch's build, NCCL across every GPU.

Marked `gpu`; they run wherever the torch host sees a GPU and are skipped, with the reason, elsewhere.
In the image: make test FLAVOR=gpu PYTEST_ARGS="-m gpu". On a GPU machine without Docker:
    TORCH_TESTS_ON_HOST=1 python -m pytest -m gpu tests/image/test_gpu.py
"""
from __future__ import annotations

import json

import pytest

from tests.image.test_torchrun import ALL_REDUCE_SCRIPT

pytestmark = [pytest.mark.tier("landing"), pytest.mark.gpu, pytest.mark.flavor_difference]


def torch_json(torch_host, code: str) -> dict:
    result = torch_host.run(f"timeout 120 python -c {json.dumps(code)}")
    assert result.rc == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_cuda_is_available_with_every_gpu(torch_host, cuda_devices):
    report = torch_json(torch_host, "import json, torch; print(json.dumps({'available': torch.cuda.is_available(), "
                                    "'count': torch.cuda.device_count(), 'cuda': torch.version.cuda}))")
    assert report["available"] and report["count"] == cuda_devices and report["cuda"]


def test_every_gpus_architecture_is_in_torchs_build(torch_host, cuda_devices):
    report = torch_json(torch_host, "import json, torch; print(json.dumps({'archs': torch.cuda.get_arch_list(), "
                                    "'caps': [torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())]}))")
    for major, minor in report["caps"]:
        native = f"sm_{major}{minor}"
        assert native in report["archs"] or f"{native}a" in report["archs"] or \
            any(arch.startswith("compute_") and int(arch[8:].rstrip("af")) <= major * 10 + minor
                for arch in report["archs"]), (native, report["archs"])


def test_bf16_matmul_runs_on_the_gpu(torch_host, cuda_devices):
    report = torch_json(torch_host, "import json, torch; a = torch.randn(256, 256, device='cuda', dtype=torch.bfloat16); "
                                    "b = (a @ a).float(); ref = a.float() @ a.float(); "
                                    "print(json.dumps({'bf16': torch.cuda.is_bf16_supported(), "
                                    "'err': ((b - ref).abs().max() / ref.abs().max()).item()}))")
    assert report["bf16"] and report["err"] < 0.05


def test_nccl_all_reduce_over_every_gpu(torch_host, cuda_devices):
    torch_host.run(f"cat > /tmp/all_reduce_gpu.py <<'PY'\n{ALL_REDUCE_SCRIPT}\nPY")
    result = torch_host.run(f"BACKEND=nccl timeout 300 torchrun --standalone --nproc-per-node={cuda_devices} "
                            "/tmp/all_reduce_gpu.py")
    assert result.rc == 0, result.stdout + result.stderr
    assert result.stdout.count(" nccl sum=") == cuda_devices
