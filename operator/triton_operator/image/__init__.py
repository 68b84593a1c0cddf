"""The slim serving image: its Dockerfile recipe (recipe.py) and the Triton runtime each release needs (runtime.py)."""
