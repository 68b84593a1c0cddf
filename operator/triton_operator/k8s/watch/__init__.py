"""What kopf shows the operator: its handlers, the indexes they keep, and the TritonModel finalizer."""
