"""doctor: checks that this container (or host) can train PyTorch on several GPUs, and says how to fix it.

Each check prints one line: its status, its name and what it found; a check that warns or fails prints
its fix underneath. `--json` prints the same as one JSON object for scripts. Only the standard library is
needed: torch is imported when a check needs it, so a missing or broken torch is itself reported.

    cli           the flags, the checks in the order they run, and the printing
    report        a check's Result, the statuses and the exit code they make
    machine       what the checks ask of the machine (torch, nvidia-smi), each once
    architecture  the CPU architecture and page size
    gpu           torch, the GPUs, the driver, the kernels built for them, the links between them
    nccl          NCCL, a real all-reduce, the NCCL_* variables, the rendezvous port
    network       which network NCCL chose, from its log; InfiniBand devices
    limits        shared memory, locked memory and the stack (the container's start-up runs these)
"""
