"""Canary rollouts in the cluster: the revision ConfigMaps and metrics, and the probe requests sent to canaries."""
