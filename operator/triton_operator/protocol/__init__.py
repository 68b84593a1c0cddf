"""What api/ and render/ share with triton/: Triton's ModelConfig messages, the names the operator and
its servers agree on, and the model the sync loads. It imports nothing of ours, so neither side
imports the other."""
