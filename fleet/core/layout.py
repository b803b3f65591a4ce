"""Where everything the deploy keeps on a host lives: the one place its paths are named. Each
is a function of the service unit U (a validated path component: fleet.spec.UnitName).

  /etc/systemd/system/U.service, /etc/sglang/U.env  the service's unit and environment (0644)
  /etc/sglang/U.yaml, /etc/sglang/U.secret          its secret arguments (--config) and secret
                                                    environment (0600; only when declared)
  /etc/sglang/U.auth                                the API key as the header requests made on
                                                    the host send (0600; only with an API key)
  /var/lib/sglang-fleet/U/spec.json        the spec the deployed files came from
  /var/lib/sglang-fleet/U/pending.json     an unfinished rollout: what the host looked like before it
  /var/lib/sglang-fleet/U/backups/STAMP/   the files a rollout replaced (fleet.rollout.commands.KEEP_BACKUPS)
  /var/lib/sglang-fleet/U/deploys.jsonl    one JSON record per rollout
  /var/lib/sglang-fleet/U/tune.json        a make tune is under way (or was cut off): the next run that
                                           is not one of its candidates returns the host to its spec
  /var/lib/sglang-fleet/U/give-back.W.log  what workload W's give-back command printed
  /run/sglang-fleet/U.lock, U.lease        who is deploying, and until when (fleet/rollout/lock.py); /run
                                           is emptied at boot, and so is a dead deploy's lock
  /var/cache/sglang-fleet/engine/          what the installed engine can do (facts/sglang.py)
  /var/cache/sglang-fleet/pip/             the pip wheel engines are installed with (tasks/engine.py)
  /var/cache/sglang-fleet/wheels/E/        engine E's declared wheel files, uploaded for its install
  /etc/sglang/U.hub-token                  the hub token (0600; only with hub.token), for the fetch
  /opt/sglang-fleet/hub/C/                 the Hugging Face client the deploy fetches with (fleet/weights/hub.py)
  /opt/sglang-fleet/models/ORG/NAME/REV/   a model's revision (hub.models_dir), its manifest
                                           (.sglang-fleet-files) written last; .REV.partial while
                                           it is fetched, .REV.log the client's words
  /opt/sglang-fleet/engines/E/             a declared engine's venv (E: fleet.spec.EngineSpec.name),
                                           its freeze (engine.lock) and install log (fleet/engine/install.py);
                                           .E.partial while being built
  /etc/systemd/system/G.service, /etc/smg/G-workers.json, G.secret, G.auth
                                           a gateway unit G's unit, the workers it routes to, its
                                           API key (EnvironmentFile) and header file (0600)
  /etc/smg/G-mesh.ca.pem, G-mesh.crt, G-mesh.key
                                           its mesh's TLS: the CA, its certificate and key (0600)
  /etc/smg/G.generation, /run/sglang-fleet/G.running
                                           what G's files and smg add up to (fleet.gateway.smg.generation),
                                           and what the running smg started with (its ExecStartPre)
  /etc/keepalived/keepalived.conf, sglang-fleet-auth.conf, /run/sglang-fleet/G.handoff, G.stopped
                                           a gateway group's VRRP (fleet/gateway/floating.py): its config, its
                                           password (0600), the deploy's and smg's hold on the election
A new file is uploaded beside its live path as hidden `.NAME.sglang-fleet-new` (systemd ignores
hidden files), so putting it live is an atomic rename on the same filesystem.
"""

from __future__ import annotations

from pathlib import PurePosixPath

UNITS_DIR = "/etc/systemd/system"
CONFIG_DIR = "/etc/sglang"
STATE_ROOT = "/var/lib/sglang-fleet"
LOCK_ROOT = "/run/sglang-fleet"
ENGINE_CACHE_DIR = "/var/cache/sglang-fleet/engine"  # regenerable: removing it costs one import
ENGINES_DIR = "/opt/sglang-fleet/engines"
MODELS_DIR = "/opt/sglang-fleet/models"  # hub.models_dir's default: ORG/NAME/REVISION below it
HUB_CLIENT_ROOT = "/opt/sglang-fleet/hub"  # the Hugging Face client the deploy fetches with (fleet/weights/hub.py)
HUB_HOME = "/var/cache/sglang-fleet/hf"  # the client's HF_HOME: nothing of it in root's home
ENGINE_INSTALL_LOCK = f"{ENGINES_DIR}/.install.lock"  # held (flock) while an install runs
ENGINE_PIP_DIR = "/var/cache/sglang-fleet/pip"  # the pip wheel engines are installed with (uploaded again if gone)
ENGINE_WHEELS_DIR = "/var/cache/sglang-fleet/wheels"  # an engine's declared wheel files, while it installs
GATEWAY_CONFIG_DIR = "/etc/smg"
STAGED_SUFFIX = ".sglang-fleet-new"


def unit_file(unit: str) -> str:
    return f"{UNITS_DIR}/{unit}.service"


def env_file(unit: str) -> str:
    return f"{CONFIG_DIR}/{unit}.env"


def secret_file(unit: str) -> str:
    return f"{CONFIG_DIR}/{unit}.secret"


def config_file(unit: str) -> str:
    return f"{CONFIG_DIR}/{unit}.yaml"


def auth_header_file(unit: str) -> str:
    return f"{CONFIG_DIR}/{unit}.auth"


def state_dir(unit: str) -> str:
    return f"{STATE_ROOT}/{unit}"


def backups_dir(unit: str) -> str:
    return f"{state_dir(unit)}/backups"


def deployed_spec_file(unit: str) -> str:
    return f"{state_dir(unit)}/spec.json"


def pending_file(unit: str) -> str:
    return f"{state_dir(unit)}/pending.json"


def tune_file(unit: str) -> str:
    return f"{state_dir(unit)}/tune.json"


def records_file(unit: str) -> str:
    return f"{state_dir(unit)}/deploys.jsonl"


def give_back_log(unit: str, workload: str) -> str:
    return f"{state_dir(unit)}/give-back.{workload}.log"


def lock_file(unit: str) -> str:
    return f"{LOCK_ROOT}/{unit}.lock"


def lease_file(lock_path: str) -> str:
    """The lease beside a lock: the host time (seconds since the epoch) until which it holds."""
    return lock_path.removesuffix(".lock") + ".lease"


def gateway_discovery_file(unit: str) -> str:
    return f"{GATEWAY_CONFIG_DIR}/{unit}-workers.json"


def gateway_secret_file(unit: str) -> str:
    return f"{GATEWAY_CONFIG_DIR}/{unit}.secret"


def gateway_auth_header_file(unit: str) -> str:
    return f"{GATEWAY_CONFIG_DIR}/{unit}.auth"


def gateway_declared_auth_header_file(unit: str) -> str:
    return f"{GATEWAY_CONFIG_DIR}/{unit}.auth.declared"


def gateway_generation_file(unit: str) -> str:
    return f"{GATEWAY_CONFIG_DIR}/{unit}.generation"


def gateway_mesh_file(unit: str, which: str) -> str:
    return f"{GATEWAY_CONFIG_DIR}/{unit}-mesh.{which}"


def gateway_running_file(unit: str) -> str:
    return f"{LOCK_ROOT}/{unit}.running"


def engine_dir(name: str) -> str:
    return f"{ENGINES_DIR}/{name}"


def engine_launcher(name: str) -> str:
    return f"{engine_dir(name)}/bin/python"


def engine_wheels(name: str) -> str:
    return f"{ENGINE_WHEELS_DIR}/{name}"


def engine_partial(name: str) -> str:
    """Where engine `name` is built until it is complete (hidden: never an engine's name)."""
    return f"{ENGINES_DIR}/.{name}.partial"


def hub_client_dir(name: str) -> str:
    return f"{HUB_CLIENT_ROOT}/{name}"


def hub_client_wheels(name: str) -> str:
    """The client's wheels, uploaded for its install."""
    return f"{ENGINE_WHEELS_DIR}/{name}"


def hub_token_file(unit: str) -> str:
    """The 0600 file the client reads the hub token from (HF_TOKEN_PATH) while it fetches."""
    return f"{CONFIG_DIR}/{unit}.hub-token"


def revision_partial(path: str) -> str:
    """Where the revision directory `path` (MODELS_DIR/ORG/NAME/REVISION) is fetched until complete."""
    parent, revision = path.rsplit("/", 1)
    return f"{parent}/.{revision}.partial"


def revision_lock(path: str) -> str:
    """Held (flock) while the revision at `path` is fetched."""
    parent, revision = path.rsplit("/", 1)
    return f"{parent}/.{revision}.lock"


def revision_log(path: str) -> str:
    """The client's own words (stderr) of the last fetch of the revision at `path`."""
    parent, revision = path.rsplit("/", 1)
    return f"{parent}/.{revision}.log"


def staged_path(path: str) -> str:
    """Where a new file for `path` is uploaded before it goes live."""
    p = PurePosixPath(path)
    return str(p.parent / f".{p.name}{STAGED_SUFFIX}")


def staged_names(unit: str) -> list[str]:
    """The names of the files made from unit name `unit` as each is staged beside its live path
    (.U.hub-token.sglang-fleet-new): the longest a name of it gets, longer than a .tmp (the gateway's
    discovery file) or a lease's .new. fleet.spec bounds a unit name so that each fits a file name."""
    staged = (unit_file, env_file, secret_file, config_file, auth_header_file, hub_token_file, gateway_secret_file,
              gateway_auth_header_file)
    return [PurePosixPath(staged_path(f(unit))).name for f in staged]
