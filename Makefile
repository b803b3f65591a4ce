# Every target installs what it needs. Two commands do everything on a fresh machine:
#   make demo   bring the lab up and run the real deploy + verify against it
#   make test   every test (unit, SGLang parser contract, lab end-to-end)
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
INVENTORY ?= inventory.py
LAB ?= lab/default.toml
export SGLANG_FLEET_CACHE ?= $(HOME)/.cache/sglang-fleet

.PHONY: venv host-packages sglang-venv check dry deploy verify test test-unit demo lab-up lab-down lab-status bench

$(BIN)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[test]'
	touch $@

venv: $(BIN)/.installed

# The lab needs systemd-nspawn and debootstrap from Debian (root, as on CI).
host-packages:
	@command -v systemd-nspawn >/dev/null && command -v debootstrap >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd-container debootstrap; }

# The real SGLang 0.5.23 (CPU torch), cached outside the checkout, for the parser contract test.
sglang-venv:
	bash tools/sglang-venv.sh >/dev/null

check: venv
	$(BIN)/python -m fleet.check $(INVENTORY)

dry: venv
	$(BIN)/pyinfra --dry --diff $(INVENTORY) deploy.py

deploy: venv
	$(BIN)/pyinfra -y $(INVENTORY) deploy.py

verify: venv
	$(BIN)/pytest -q -p no:cacheprovider tests/verify --inventory $(INVENTORY)

test-unit: venv
	$(BIN)/pytest -q tests/unit

test: venv host-packages sglang-venv
	$(BIN)/pytest -q tests

lab-up: venv host-packages
	$(BIN)/python -m lab.lab up --lab $(LAB)

lab-down: venv
	$(BIN)/python -m lab.lab down

lab-status: venv
	$(BIN)/python -m lab.lab status

demo: venv host-packages
	$(BIN)/python -m lab.lab up --lab $(LAB)
	$(BIN)/pyinfra -y .lab/inventory.py deploy.py
	$(MAKE) --no-print-directory verify INVENTORY=.lab/inventory.py
	@echo "The lab stays up for you to look around (make lab-status); make lab-down removes it."

bench: venv host-packages
	$(BIN)/python bench/rollout.py
