"""--data-dir: the trainer learns from a folder of real images, one sub-folder per class (torchvision's
ImageFolder), and a folder it cannot train on ends the start with one line instead of a traceback or a
run that waits for ever for its first batch.

It needs torchvision, and skips, saying so, where the image has none: NGC's images have it; the CPU
flavor has it only where its build found a torchvision made for its torch (docs/editors.md), which this
project's CI machines do not offer. tests/unit/test_batch_stream.py holds the rule against hanging.

Run: `make test PYTEST_ARGS=tests/trainer/test_image_folder.py`.
"""
from __future__ import annotations

import pytest

from tests.support.training import make_workdir, trainer_command

pytestmark = pytest.mark.tier("landing")

# Writes FOLDER/CLASS/N.png for each CLASS=COUNT argument: 20x20 images of random colours (Pillow comes
# with torchvision), so the loader decodes, resizes and crops real files.
MAKE_IMAGES = """
import pathlib, random, sys
from PIL import Image
folder = pathlib.Path(sys.argv[1])
for spec in sys.argv[2:]:
    name, count = spec.split("=")
    (folder / name).mkdir(parents=True, exist_ok=True)
    for index in range(int(count)):
        colour = tuple(random.randrange(256) for _ in range(3))
        Image.new("RGB", (20, 20), colour).save(folder / name / f"{index}.png")
"""
FLAGS = "--model tiny --image-size 16 --batch-size 4 --log-every 1 --num-workers 1"


@pytest.fixture(scope="module")
def workdir(torch_host):
    if torch_host.run("python -c 'import torchvision'").rc != 0:
        pytest.skip("torchvision is not installed here, and --data-dir needs it (NGC's images have it)")
    path = make_workdir(torch_host)
    torch_host.check_output(f"cat > {path}/make_images.py <<'EOF'\n{MAKE_IMAGES}\nEOF")
    yield path
    torch_host.run(f"rm -rf {path}")


def make_images(torch_host, workdir: str, folder: str, *classes: str) -> str:
    torch_host.check_output(f"python {workdir}/make_images.py {workdir}/{folder} {' '.join(classes)}")
    return f"{workdir}/{folder}"


def test_two_ranks_train_on_an_image_folder_and_save(torch_host, scripts_dir, workdir):
    images = make_images(torch_host, workdir, "pets", "cat=8", "dog=8")
    result = torch_host.run(f"{trainer_command(scripts_dir=scripts_dir)} {FLAGS} --data-dir {images} "
                            f"--max-steps 3 --ckpt-dir {workdir}/checkpoints")
    assert result.rc == 0, result.stdout + result.stderr
    # 16 images over 2 ranks, 4 a batch: 2 batches an epoch, so 3 steps cross an epoch's end
    assert "on 2 rank(s)" in result.stdout and "2 micro-batches per epoch per rank" in result.stdout
    assert f"done: 3 steps, checkpoints in {workdir}/checkpoints" in result.stdout
    assert torch_host.file(f"{workdir}/checkpoints/step_000003.pt").exists


FULL_TIER = pytest.mark.tier("full")  # the landing tier keeps the one that used to hang


@pytest.mark.parametrize(("layout", "message"), [
    pytest.param(["cat=1", "dog=2"], "holds 3 samples, fewer than one batch on every rank (4 x 1 ranks); add data "
                 "or lower --batch-size", id="fewer images than a batch"),
    pytest.param([], "is not a folder of images per class: Couldn't find any class folder", id="no class folder",
                 marks=FULL_TIER),
    pytest.param(["cat=4", "empty=0"], "is not a folder of images per class: Found no valid file for the classes "
                 "empty", id="a class folder without images", marks=FULL_TIER),
])
def test_a_folder_it_cannot_train_on_is_one_line(torch_host, scripts_dir, workdir, layout, message):
    folder = "unusable-" + "-".join(spec.split("=")[0] for spec in layout)
    images = make_images(torch_host, workdir, folder, *layout)
    torch_host.check_output(f"mkdir -p {images} && touch {images}/notes.txt")  # a file that is no image
    result = torch_host.run(f"{trainer_command(nproc=None, scripts_dir=scripts_dir, timeout_s=60)} {FLAGS} "
                            f"--data-dir {images} --ckpt-dir {workdir}/{folder}-checkpoints")
    lines = result.stderr.strip().splitlines()
    assert result.rc == 2 and len(lines) == 1, result.stdout + result.stderr
    assert lines[0].startswith("train_ddp.py: error: ") and message in lines[0], lines
    assert not result.stdout  # nothing trained, nothing announced
