"""Operator commands over the fleet, read-only: `python -m ops status|history` (make status, make history)."""
