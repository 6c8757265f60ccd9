"""Building blocks of the sample trainer (`train_ddp.py`): configuration, data, models (CNN and GPT),
DDP/FSDP wrapping, the training state, checkpoints, process-group plumbing and metrics, each in its own
small module so the training script itself reads top to bottom. The package imports nothing from
outside itself but torch (and numpy for token files), so it can be copied into another project."""
