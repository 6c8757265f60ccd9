"""Building blocks of the sample trainer (`train_ddp.py`): configuration, data, models (CNN and GPT),
Hugging Face GPT-2 folders in and out, DDP/FSDP wrapping, the training state, checkpoints (and their
background writes), process-group plumbing and metrics, each in its own small module so the training
script itself reads top to bottom. The package imports nothing from outside itself but torch (numpy for
token files, safetensors for Hugging Face folders, prometheus_client and tensorboard when asked for),
so it can be copied into another project."""
