"""The server's pods: their sync over Triton's control API, their readinessGate, and whether they are reachable."""
