"""What each model costs in memory: the pod's python stubs as /proc shows them, attributed to models
(attribution.py), the sidecar that serves them (sidecar.py), and what NVML says they hold on GPUs (nvml.py)."""
