"""Example fleet: hosts grouped by GPU class, one pyinfra group per group_data file.

These hosts are examples (the reserved .example domain): no test ever contacts them.
Use your own file with INVENTORY=path, or the lab's: `make deploy INVENTORY=.lab/inventory.py`.
"""

from tasks.inventory import checked

_ssh = {"ssh_user": "root", "ssh_key": "~/.ssh/id_ed25519"}

pro6000 = [
    ("gpu-pro6000-01.fleet.example", {**_ssh}),
    ("gpu-pro6000-02.fleet.example", {**_ssh}),
]

a6000 = [
    ("gpu-a6000-01.fleet.example", {**_ssh}),
]

h200 = [
    ("gpu-h200-01.fleet.example", {**_ssh, "ssh_port": 2222}),
]

# SGLang's gateway (smg) in front of the pro6000 replicas (group_data/gateway.py).
gateway = [
    ("gw-01.fleet.example", {**_ssh}),
]

# Validate group_data and this file before pyinfra connects to anything; unreachable hosts get
# a row in the summary.
checked(globals())
