"""pyinfra task files: one per stage of the runbook that deploy.py reads as."""
