"""The operator's process: `triton-operator run`, its settings and its Prometheus metrics."""
