"""The GPT model under FSDP and DDP: the same result as one process, exact stop and resume, sharded
checkpoints that reshard (2 -> 4 -> 2 ranks), move between DDP and FSDP, fall back past a truncated
shard, and export to one plain state_dict file; and learning on a text file made by prepare_text.py.

    make test PYTEST_ARGS="tests/trainer/test_gpt_fsdp.py"
    TORCH_TESTS_ON_HOST=1 IMAGE_UNDER_TEST=none python -m pytest tests/trainer/test_gpt_fsdp.py

Every run trains gpt-tiny (2 blocks) on 32-token sequences, global batch 8, for 12 steps, with a
checkpoint at step 6: a few seconds each on 2 CPU cores.
"""
from __future__ import annotations

import re

import pytest

from tests.support.training import (ENV, SIGTERM_TO_TORCHRUN, interrupt_when_step_logged, make_workdir, python_json,
                                    read_metrics, trainer_command)

pytestmark = pytest.mark.tier("full")

STEPS, HALF = 12, 6
SEQ_LEN = 32
GPT = (f"--model gpt-tiny --seq-len {SEQ_LEN} --synthetic-samples 256 --num-workers 0 --warmup-steps 2 --lr 3e-3 "
       "--seed 5 --log-every 1 --peak-tflops 1")
GLOBAL_BATCH = 8
# Tolerance for runs that differ only in how gradients are summed (one process, DDP's all-reduce, FSDP's
# reduce-scatter, 2 or 4 ranks): fp32 sums in another order differ in the last bits (about 1e-7 relative).
# AdamW divides each gradient by its running RMS, which amplifies that noise where a gradient is (nearly)
# zero: the key part of qkv.bias has a gradient that is exactly zero in exact arithmetic (softmax ignores
# a constant added to every score), so it moves on rounding noise alone, by up to lr * noise / eps per
# step. Measured after 12 steps: 3e-7 between FSDP and DDP elsewhere, 2.6e-5 at worst (those biases, and
# a few rarely-used weights between 1 and 2 ranks). 1e-4 absolute leaves 4x room and is still 30x smaller
# than what one step moves a weight (about lr = 3e-3), so a skipped, repeated or wrongly sharded step fails.
ATOL, RTOL = 1e-4, 0.0


def trainer(script: str, nproc: int, parallel: str, workdir: str, name: str, max_steps: int = STEPS,
            save_every: int = HALF) -> str:
    """A command that runs SCRIPT (the trainer, or a wrapper and its arguments) in WORKDIR/NAME at NPROC ranks
    (global batch 8) with DDP or FSDP."""
    return (f"{trainer_command(GPT, script=script, nproc=nproc)} --batch-size {GLOBAL_BATCH // nproc} "
            f"--parallel {parallel} --max-steps {max_steps} --save-every {save_every} --ckpt-dir {workdir}/{name} "
            f"--metrics-file {workdir}/{name}.jsonl")


# Runs train_ddp.main() unchanged, but right after it resumed, rank 0 writes the full model and optimizer
# state every rank now holds (gathered from the shards) to CKPT_DIR/loaded.pt, for comparing with the saved one.
DUMP_AFTER_RESUME = """
import sys
import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
sys.path.insert(0, sys.argv.pop(1))
import train_ddp
from trainer.checkpointer import Checkpointer
resume = Checkpointer.resume
def resume_and_dump(checkpointer):
    resume(checkpointer)
    state = checkpointer.state
    model, optimizer = get_state_dict(state.model, state.optimizer,
                                      options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if state.placement.is_main:
        torch.save({"model": model, "optimizer": optimizer}, state.args.ckpt_dir / "loaded.pt")
Checkpointer.resume = resume_and_dump
sys.exit(train_ddp.main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def runs(torch_host, scripts_dir):
    workdir = make_workdir(torch_host)
    torch_host.check_output(f"cat > {workdir}/dump_after_resume.py <<'EOF'\n{DUMP_AFTER_RESUME}\nEOF")
    fsdp = trainer(f"{scripts_dir}/train_ddp.py", 2, "fsdp", workdir, "fsdp")
    torch_host.check_output(f"{fsdp} > {workdir}/fsdp.out")  # the progress lines, for the metrics test
    torch_host.check_output(trainer(f"{scripts_dir}/train_ddp.py", 2, "ddp", workdir, "ddp"))
    torch_host.check_output(f"{trainer_command(nproc=None, scripts_dir=scripts_dir)} {GPT} "
                            f"--max-steps {STEPS} --save-every {HALF} --batch-size {GLOBAL_BATCH} "
                            f"--ckpt-dir {workdir}/single")
    yield workdir
    torch_host.run(f"rm -rf {workdir}")


def compare_models(torch_host, scripts_dir: str, first: str, second: str, exact: bool = False) -> dict:
    """The final models of two checkpoint folders, read whole as export_weights.py reads them (any layout):
    the largest absolute difference, and whether they are allclose (or, if EXACT, bit-identical)."""
    return python_json(torch_host, f"""
import json, pathlib, sys, torch
sys.path.insert(0, {scripts_dir!r})
from export_weights import read_model_weights
from trainer.checkpoint_folder import list_checkpoints_newest_first
newest = lambda folder: list_checkpoints_newest_first(pathlib.Path(folder))[0]
a, b = read_model_weights(newest({first!r})), read_model_weights(newest({second!r}))
assert a.keys() == b.keys(), (a.keys(), b.keys())
same = torch.equal if {exact!r} else lambda x, y: torch.allclose(x, y, rtol={RTOL}, atol={ATOL})
print(json.dumps({{"max_abs_difference": max((a[k] - b[k]).abs().max().item() for k in a),
                  "close": all(same(a[k], b[k]) for k in a)}}))
""")


def resume_copy(torch_host, workdir: str, source: str, step: int, name: str) -> None:
    """Puts only SOURCE's checkpoint at STEP into the fresh checkpoint folder WORKDIR/NAME."""
    checkpoint = f"step_{step:06d}" + (".pt" if source == "ddp" else "")
    torch_host.check_output(f"mkdir {workdir}/{name} && cp -r {workdir}/{source}/{checkpoint} {workdir}/{name}/")


def test_fsdp_ddp_and_one_process_reach_the_same_parameters(torch_host, scripts_dir, runs):
    for other in ("ddp", "single"):
        comparison = compare_models(torch_host, scripts_dir, f"{runs}/fsdp", f"{runs}/{other}")
        assert comparison["close"], (other, comparison)
    losses = [record["loss"] for record in read_metrics(torch_host, f"{runs}/fsdp.jsonl")]
    assert len(losses) == STEPS and sum(losses[-3:]) < 0.9 * sum(losses[:3]), losses


def test_metrics_report_tokens_mfu_and_the_memory_of_every_rank(torch_host, runs):
    progress = torch_host.file(f"{runs}/fsdp.out").content_string
    assert re.search(r"step 12/12 \| loss [\d.]+ \| .* tokens/s \| .* \| mfu [\d.]+% \| mem [\d.]+ GiB/rank", progress)
    fsdp, ddp = (read_metrics(torch_host, f"{runs}/{name}.jsonl")[-1] for name in ("fsdp", "ddp"))
    assert fsdp["tokens_per_sec"] == pytest.approx(fsdp["samples_per_sec"] * SEQ_LEN)
    # 6N + 12 L H Q T FLOPs per token (trainer/gpt.py), over 2 ranks' peak of 1 TFLOP/s (--peak-tflops 1)
    weights = 462_336 - 256 * 128  # gpt-tiny's parameters less the position embeddings
    flops_per_token = 6 * weights + 12 * 2 * 128 * SEQ_LEN
    assert fsdp["mfu"] == pytest.approx(fsdp["tokens_per_sec"] * flops_per_token / 2e12)
    # Parameters, gradients and AdamW state: each FSDP rank holds half of what each DDP rank holds.
    assert len(fsdp["memory_gib_per_rank"]) == len(ddp["memory_gib_per_rank"]) == 2
    assert fsdp["max_memory_gib"] == pytest.approx(ddp["max_memory_gib"] / 2, rel=0.001), (fsdp, ddp)


def test_export_is_a_plain_state_dict_for_the_bare_model(torch_host, scripts_dir, runs):
    exported = f"{runs}/exported.pt"
    torch_host.check_output(f"{ENV} timeout 60 python {scripts_dir}/export_weights.py --ckpt-dir {runs}/fsdp "
                            f"--output {exported}")
    result = python_json(torch_host, f"""
import json, sys, torch
sys.path.insert(0, {scripts_dir!r})
from trainer.model import build_model
model = build_model("gpt-tiny", num_classes=0, vocab_size=None)
print(json.dumps(str(model.load_state_dict(torch.load({exported!r}, weights_only=True)))))
""")
    assert result == "<All keys matched successfully>"


def compare_loaded_with_saved(torch_host, pairs: list[tuple[str, str]]) -> list[dict]:
    """For each (LOADED, SAVED_FOLDER): the model and optimizer tensors of LOADED (a dump right after resume)
    against the sharded checkpoint SAVED_FOLDER read whole in one process, compared bit for bit."""
    return python_json(torch_host, f"""
import json, torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
results = []
for loaded_file, saved_folder in {pairs!r}:
    dcp_to_torch_save(saved_folder, saved_folder + ".full.pt")
    saved = torch.load(saved_folder + ".full.pt", weights_only=True)
    loaded = torch.load(loaded_file, weights_only=True)
    model_equal = loaded["model"].keys() == saved["model"].keys() and all(
        torch.equal(loaded["model"][k], saved["model"][k]) for k in loaded["model"])
    optimizer_equal = loaded["optimizer"]["state"].keys() == saved["optimizer"]["state"].keys() and all(
        torch.equal(value, saved["optimizer"]["state"][name][key])
        for name, state in loaded["optimizer"]["state"].items() for key, value in state.items())
    results.append({{"model": model_equal, "optimizer": optimizer_equal,
                    "tensors": len(loaded["model"]) + len(loaded["optimizer"]["state"])}})
print(json.dumps(results))
""")


def test_resharding_2_to_4_to_2_ranks_loads_exactly_what_was_saved_and_training_continues(
        torch_host, scripts_dir, runs):
    """2-rank step 6 -> 4 ranks to step 12 (saving at 9) -> 4-rank step 9 -> 2 ranks to step 12.

    Both resumed runs keep --max-steps, so their LR schedule is the reference's, and keep the global
    batch, so they see the reference's batches: they must end where the uninterrupted 2-rank run ended.
    """
    dump = f"{runs}/dump_after_resume.py {scripts_dir}"
    resume_copy(torch_host, runs, "fsdp", HALF, "reshard4")
    torch_host.check_output(trainer(dump, 4, "fsdp", runs, "reshard4", save_every=3))
    losses = [record["loss"] for record in read_metrics(torch_host, f"{runs}/reshard4.jsonl")]
    assert len(losses) == STEPS - HALF and losses[-1] < losses[0], losses

    four_rank_checkpoint = f"{runs}/reshard4/step_000009"
    assert len(torch_host.check_output(f"ls {four_rank_checkpoint}/*.distcp").split()) == 4
    resume_copy(torch_host, runs, "reshard4", 9, "reshard2")
    output = torch_host.check_output(trainer(dump, 2, "fsdp", runs, "reshard2") + " 2>&1")
    assert f"resumed from {runs}/reshard2/step_000009: step 9" in output
    assert [record["step"] for record in read_metrics(torch_host, f"{runs}/reshard2.jsonl")] == [10, 11, 12]

    two_to_four, four_to_two = compare_loaded_with_saved(torch_host, [
        (f"{runs}/reshard4/loaded.pt", f"{runs}/fsdp/step_{HALF:06d}"),
        (f"{runs}/reshard2/loaded.pt", four_rank_checkpoint)])
    assert two_to_four["model"] and two_to_four["optimizer"] and two_to_four["tensors"] > 20, two_to_four
    assert four_to_two["model"] and four_to_two["optimizer"], four_to_two

    for resharded in ("reshard4", "reshard2"):
        comparison = compare_models(torch_host, scripts_dir, f"{runs}/{resharded}", f"{runs}/fsdp")
        assert comparison["close"], (resharded, comparison)


@pytest.mark.parametrize(("source", "target"), [("ddp", "fsdp"), ("fsdp", "ddp")])
def test_a_checkpoint_resumes_under_the_other_parallelism(torch_host, scripts_dir, runs, source, target):
    name = f"{source}_to_{target}"
    resume_copy(torch_host, runs, source, HALF, name)
    output = torch_host.check_output(trainer(f"{scripts_dir}/train_ddp.py", 2, target, runs, name) + " 2>&1")
    suffix = ".pt" if source == "ddp" else ""
    assert f"resumed from {runs}/{name}/step_{HALF:06d}{suffix}: step {HALF}" in output
    comparison = compare_models(torch_host, scripts_dir, f"{runs}/{name}", f"{runs}/{target}")
    assert comparison["close"], comparison


def test_sigterm_under_fsdp_saves_and_the_resumed_run_ends_like_the_uninterrupted_one(
        torch_host, scripts_dir, runs):
    command = trainer(f"{scripts_dir}/train_ddp.py", 2, "fsdp", runs, "sigterm")
    # Signalled at step 1 of 12: under load the wait may lag a few steps behind the trainer.
    status, _, log = interrupt_when_step_logged(torch_host, command, runs, "sigterm", 1, SIGTERM_TO_TORCHRUN)
    stopped = re.search(r"stopped by SIGTERM at step (\d+)/", log)
    assert stopped, f"exit status {status}:\n{log}"
    stop_step = int(stopped[1])
    assert torch_host.file(f"{runs}/sigterm/step_{stop_step:06d}").is_directory
    resumed = torch_host.check_output(f"{command} 2>&1")
    assert f"resumed from {runs}/sigterm/step_{stop_step:06d}: step {stop_step}" in resumed
    steps = [record["step"] for record in read_metrics(torch_host, f"{runs}/sigterm.jsonl")]
    assert steps == list(range(1, STEPS + 1))
    # Same world size, same reduction order: bit-identical, not just close.
    comparison = compare_models(torch_host, scripts_dir, f"{runs}/sigterm", f"{runs}/fsdp", exact=True)
    assert comparison["close"], comparison


def test_a_truncated_shard_falls_back_to_the_previous_checkpoint(torch_host, scripts_dir, runs):
    torch_host.check_output(f"cp -r {runs}/fsdp {runs}/truncated")
    shard = f"{runs}/truncated/step_{STEPS:06d}/__1_0.distcp"
    torch_host.check_output(f"truncate --size=$(( $(stat -c %s {shard}) / 2 )) {shard}")
    output = torch_host.check_output(trainer(f"{scripts_dir}/train_ddp.py", 2, "fsdp", runs, "truncated") + " 2>&1")
    newest = f"{runs}/truncated/step_{STEPS:06d}"
    assert re.search(rf"checkpoint {newest} is unreadable \(shard __1_0.distcp is truncated \(\d+ of \d+ bytes\)\); "
                     rf"moved {newest} aside to {newest}.corrupt", output), output
    assert f"resumed from {runs}/truncated/step_{HALF:06d}: step {HALF}" in output
    comparison = compare_models(torch_host, scripts_dir, f"{runs}/truncated", f"{runs}/fsdp", exact=True)
    assert comparison["close"], comparison


def test_loss_falls_on_a_text_file_prepared_by_the_script(torch_host, scripts_dir):
    workdir = make_workdir(torch_host)
    # Any UTF-8 text will do; the trainer's own source is on every torch host.
    torch_host.check_output(f"cat {scripts_dir}/trainer/*.py > {workdir}/text.txt && "
                            f"{ENV} timeout 60 python {scripts_dir}/prepare_text.py "
                            f"{workdir}/text.txt {workdir}/text.bin")
    torch_host.check_output(
        f"{trainer_command(nproc=None, scripts_dir=scripts_dir)} --model gpt-tiny --seq-len 64 "
        f"--data-file {workdir}/text.bin --batch-size 8 --max-steps 30 --warmup-steps 3 --lr 3e-3 --num-workers 0 "
        f"--log-every 1 --save-every 0 --ckpt-dir {workdir}/ckpt --metrics-file {workdir}/text.jsonl")
    losses = [record["loss"] for record in read_metrics(torch_host, f"{workdir}/text.jsonl")]
    torch_host.run(f"rm -rf {workdir}")
    # From ln(256) = 5.5 for a uniform guess; byte frequencies alone bring it near 3.5 within these steps.
    assert sum(losses[-3:]) / 3 < 0.75 * sum(losses[:3]) / 3, losses
