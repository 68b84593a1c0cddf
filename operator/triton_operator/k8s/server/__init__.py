"""Reconciling one TritonServer: its worker's passes and everything a pass writes for it."""
