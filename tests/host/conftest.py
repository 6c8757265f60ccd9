"""The host tier's processes run the checkout's scripts with the test venv's torch: the trainer's package
is imported from scripts/, as train_ddp.py imports it."""
from __future__ import annotations

import sys

from tests.support import REPO_ROOT

if str(REPO_ROOT / "scripts") not in sys.path:
    sys.path.insert(0, str(REPO_ROOT / "scripts"))
