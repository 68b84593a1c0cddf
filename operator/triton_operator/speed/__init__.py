"""Code that exists only for speed: each module re-implements something slower that it must equal, beside its
equivalence test (tests/speed/), and names the figure that justifies it in bench/RESULTS.md."""
