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

.PHONY: venv host-packages sglang-venv check dry deploy verify status monitor history rollback tune test test-unit test-busy demo lab-up lab-down lab-status bench

$(BIN)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[test]'
	touch $@

venv: $(BIN)/.installed

# The lab needs systemd-nspawn and debootstrap from Debian (root, as on CI); the unit tests check the
# on-host shell programs (fleet/programs/*.sh) with Debian's shellcheck, and the generated monitoring
# configuration with promtool and amtool, taken out of Debian's packages (tools/debs.sh: downloaded once into
# the cache, also the lab's package repository for its monitoring host).
host-packages:
	@command -v systemd-nspawn >/dev/null && command -v debootstrap >/dev/null && command -v shellcheck >/dev/null && \
	  command -v dpkg-scanpackages >/dev/null || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd-container debootstrap shellcheck dpkg-dev; }
	@bash tools/debs.sh >/dev/null

# The real SGLang 0.5.23 (CPU torch), cached outside the checkout: the parser venv for the contract tests, and its
# serving layer for the lab's real server (lab/realsglang.py).
sglang-venv:
	bash tools/sglang-venv.sh --serve >/dev/null

check: venv
	$(BIN)/python -m fleet.spec.check $(INVENTORY)

# ARGS: more pyinfra (or pytest, for verify) arguments, e.g. ARGS="--limit h1"
dry: venv
	$(BIN)/pyinfra --dry --diff $(ARGS) $(INVENTORY) deploy.py

deploy: venv
	$(BIN)/pyinfra -y $(ARGS) $(INVENTORY) deploy.py

verify: venv
	$(BIN)/pytest -q -p no:cacheprovider tests/verify --inventory $(INVENTORY) $(ARGS)

# What every host serves now and how it differs from group_data (ARGS="--json", "--limit h").
status: venv
	$(BIN)/python -m ops status $(INVENTORY) $(ARGS)

# What the monitoring host scrapes, what fires now, what is silenced, and the link to Prometheus.
monitor: venv
	$(BIN)/python -m ops monitor $(INVENTORY)

history: venv
	@test -n "$(HOST)" || { echo "make history HOST=<host> [INVENTORY=f]"; exit 2; }
	$(BIN)/python -m ops history $(INVENTORY) $(HOST) $(ARGS)

# Put back a backup set (TO=<stamp>, default "previous": the set before the last successful
# change) through preflight, lock, gate and smoke test; a failure rolls forward to what ran
# before. `make history HOST=h` lists them. The set is an argument of this one run (--data),
# never an environment variable: nothing left exported turns a later deploy into a rollback.
rollback: venv
	@test -n "$(HOST)" || { echo "make rollback HOST=<host> [TO=<stamp>] [INVENTORY=f]"; exit 2; }
	$(BIN)/pyinfra -y --limit $(HOST) --data 'sglang_fleet_rollback=$(or $(TO),previous)' $(ARGS) $(INVENTORY) deploy.py

# The draft length measured on one host of CLASS (ops/tune.py): each candidate deployed, the workload streamed at
# each concurrency, the host back on its declared spec; record in tuning/CLASS.json. ARGS: --yes (no gateway: the
# host stops serving), --apply (write the winner into group_data), --block-sizes 4,8 --concurrency 1,32 ...
tune: venv
	@test -n "$(CLASS)" || { echo "make tune CLASS=<class> [HOST=<host>] [ARGS='--yes --apply'] [INVENTORY=f]"; exit 2; }
	$(BIN)/python -m ops tune $(INVENTORY) --class $(CLASS) $(if $(HOST),--host $(HOST)) $(ARGS)

test-unit: venv host-packages
	$(BIN)/pytest -q tests/unit

# The unit and contract tests (their output in .test-unit.log, shown after) beside the lab's, which run in
# LAB_WORKERS pytest-xdist workers, a group of modules at a time each (tests/lab/conftest.py's MODULES: each module's
# group and labs, no lab in two groups): the lab's tests mostly wait on their hosts. Both must pass. The coverage is of the
# tests' own processes (unit, and the controller side of the lab's), combined; the deploys the lab tests run are
# pyinfra processes of their own, not counted.
LAB_WORKERS ?= 3
COV := --cov=adapter --cov=tasks --cov=fleet --cov-report=
LAB_TESTS := $(BIN)/pytest -q -n $(LAB_WORKERS) --dist loadscope --no-loadscope-reorder --durations=25 --junitxml=.test-lab.xml
test: venv host-packages sglang-venv
	@rm -f .coverage .coverage.unit .coverage.lab
	@COVERAGE_FILE=.coverage.unit $(BIN)/pytest -q --durations=10 $(COV) tests/unit tests/contract tests/verify \
	  > .test-unit.log 2>&1 & unit=$$!; \
	COVERAGE_FILE=.coverage.lab $(LAB_TESTS) $(COV) tests/lab; lab=$$?; \
	wait $$unit; unit=$$?; echo "--- unit and contract tests (.test-unit.log):"; cat .test-unit.log; \
	$(BIN)/coverage combine -q .coverage.unit .coverage.lab && $(BIN)/coverage report --include='tasks/*,fleet/*' | tail -n 3; \
	echo "lab tests: exit $$lab; unit and contract tests: exit $$unit"; [ $$lab = 0 ] && [ $$unit = 0 ]

# The lab's tests with every core kept busy for the whole run (Debian's stress-ng, one CPU hog per core): what a
# loaded CI machine does to them, seen before CI sees it. They must pass here too.
test-busy: venv host-packages sglang-venv
	@command -v stress-ng >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq stress-ng; }
	@stress-ng --cpu $$(nproc) --timeout 3h --quiet & hog=$$!; \
	echo "test-busy: stress-ng (pid $$hog) keeps $$(nproc) cores busy"; \
	$(LAB_TESTS) tests/lab; lab=$$?; kill $$hog; wait $$hog 2>/dev/null; \
	echo "lab tests beside a CPU hog: exit $$lab"; [ $$lab = 0 ]

# Labs of different names run side by side, each with its own state (.lab/<name>/) and inventory
# (.lab/<name>/inventory.py; .lab/inventory.py is the last one brought up). LAB names one; without it, lab-down
# takes down the one lab up (and names them if there are several) and lab-status shows every lab up.
LAB_GIVEN = $(if $(filter command line environment,$(origin LAB)),--lab $(LAB))
lab-up: venv host-packages
	$(BIN)/python -m lab.lab up --lab $(LAB)

lab-down: venv
	$(BIN)/python -m lab.lab down $(LAB_GIVEN)

lab-status: venv
	$(BIN)/python -m lab.lab status $(LAB_GIVEN)

demo: venv host-packages
	$(BIN)/python -m lab.lab up --lab $(LAB)
	$(BIN)/pyinfra -y $$($(BIN)/python -m lab.lab inventory --lab $(LAB)) deploy.py
	$(MAKE) --no-print-directory verify INVENTORY=$$($(BIN)/python -m lab.lab inventory --lab $(LAB))
	@echo "The lab stays up for you to look around (make lab-status); make lab-down LAB=$(LAB) removes it."

bench: venv host-packages
	$(BIN)/python bench/rollout.py
	$(BIN)/python bench/status.py
	$(BIN)/python bench/gateway.py
	$(BIN)/python bench/turns.py
	$(BIN)/python bench/canary.py
	$(BIN)/python bench/engine.py
	$(BIN)/python bench/weights.py
	$(BIN)/python bench/tune.py
	$(BIN)/python bench/monitoring.py
	$(BIN)/python bench/real.py
