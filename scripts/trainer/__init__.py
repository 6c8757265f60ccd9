"""Building blocks of the sample DDP trainer (`train_ddp.py`): configuration, data, model,
checkpoints, process-group plumbing and metrics, each in its own small module so the training
script itself reads top to bottom."""
