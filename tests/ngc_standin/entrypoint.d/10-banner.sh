# Stand-in for NGC's banner script (which also checks the driver and /dev/shm).
echo "== NGC PyTorch STAND-IN (not NVIDIA's image): torch ${PYTORCH_VERSION:-?}, no CUDA =="
