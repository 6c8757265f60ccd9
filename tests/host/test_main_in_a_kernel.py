"""The trainer's main() called in a process that goes on after it, as a notebook kernel's cell calls it:
the process gets back its own signal handlers and its garbage collector as they were (main() takes
SIGTERM, SIGINT and SIGHUP while it trains, and freezes the imports' objects). A torch process, so
here rather than in the unit tier, which starts none (docs/testing.md).

    make test PYTEST_ARGS=tests/host/test_main_in_a_kernel.py
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support import REPO_ROOT

pytestmark = pytest.mark.tier("landing")

# A kernel's view: its own SIGTERM handler and SIGHUP ignored, then one short main() in a "cell"; after it,
# its handlers and its garbage collector (main() freezes the imports' objects while it trains) as they were.
AFTER_MAIN = """
import gc, signal, sys
sys.path.insert(0, sys.argv[1])
import train_ddp
def kernels_own(signum, frame): pass
signal.signal(signal.SIGTERM, kernels_own)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
before = [signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)]
status = train_ddp.main(sys.argv[2:])
after = [signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)]
print(status, after == before and gc.get_freeze_count() == 0, after, gc.get_freeze_count())
"""


def test_train_ddp_main_returns_the_process_with_its_own_handlers(tmp_path):
    flags = ["--model", "tiny", "--image-size", "16", "--synthetic-samples", "64", "--batch-size", "8",
             "--max-steps", "2", "--num-workers", "0", "--ckpt-dir", str(tmp_path / "ckpt")]
    result = subprocess.run([sys.executable, "-c", AFTER_MAIN, str(REPO_ROOT / "scripts"), *flags],
                            capture_output=True, text=True, timeout=120, check=False,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().splitlines()[-1].startswith("0 True"), result.stdout + result.stderr
