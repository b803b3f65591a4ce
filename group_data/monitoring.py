"""The fleet's Prometheus and Alertmanager (Debian's packages) on the monitoring host.

The deploy installs both, scrapes every replica of every class in the inventory and each gateway's
smg, and loads the rules it generates per class: the accept length of speculative decoding, a
replica or gateway down, queues, time to first token, throughput. Every key: docs/spec.md (monitoring).
"""

monitoring = {
    "scrape_interval_s": 15,
    "retention_days": 15,
    # Both ask every client for this user's password (the deploy's own calls give it from a 0600 file on the host)
    "password": {"env": "SGLANG_FLEET_MONITORING_PASSWORD"},
    # Where notifications go (Alertmanager's webhook_config), e.g.
    #   "receivers": [{"name": "oncall", "webhook_url": "https://alerts.fleet.example/sglang"}],
    # a URL that is a secret itself (Slack's, Discord's, Teams'): from a secret source, never written here
    #   "receivers": [{"name": "chat", "webhook_url": {"env": "SLACK_WEBHOOK_URL"}}],
    "receivers": [],
    "alerts": {
        # Under this accept length (tokens per verify step) the draft costs more than it gives; a class not
        # listed here gets 0.7 of what make tune measured (tuning/<class>.json).
        "accept_length_floor": {"pro6000": 3.0},
    },
}
