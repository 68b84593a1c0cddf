"""What the operator and its Triton servers agree on, used by api/ and render/ on one side and triton/ on
the other: it imports nothing of ours, so neither side needs the other."""
