"""Prometheus and Alertmanager on the monitoring host: the spec, the generated bundle, the silences."""
