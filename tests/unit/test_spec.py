"""fleet.spec and fleet.spec.load on good and bad data, no hosts.

The shipped group_data must validate and express the seed case; every refusal must
name the field, the value and what is allowed; the API key must never be printed.
Broken group_data *files* (file name in the message, `make check`'s exit code) are
covered in test_check.py.
"""

from __future__ import annotations

import json
import typing
from pathlib import Path

import pytest
from pydantic import ValidationError
from pydantic_core import PydanticUndefined

from fleet.spec.load import SpecError, explain, load_class_specs, spec_data, validate_class
from fleet.spec import (
    ALGORITHM_TAGS,
    CONFIG_FLAG,
    INLINE_SECRET_FLAGS,
    NOT_ABBREVIATIONS,
    SECRET_FLAG_FIELDS,
    SECRET_FLAGS,
    SPEC_FLAGS,
    SPEC_KEYS,
    ClassSpec,
    DDTree,
    DFlash,
    EagleFamily,
    NAME_MAX,
    NoSpeculation,
    PROMPT_MAX,
    ProcessWorkload,
    ScopeWorkload,
    glob_matches,
)

ROOT = Path(__file__).resolve().parents[2]
GROUP_DATA = ROOT / "group_data"
SRC = "group_data/x.py"
KEY = "sk-Fleet0123456789abcdef"  # a well-formed API key: must never show in any message

GPU = {"accepted_models": ["NVIDIA RTX A6000"], "gpu_count": 2, "min_memory_mib": 48000}
SERVICE = {"model_path": "/root/models/Qwen3-8B", "served_model_name": "qwen3-8b"}


def data(**top) -> dict:
    """A valid class spec's data, with top-level names replaced."""
    return {"gpu_class": dict(GPU), "service": dict(SERVICE), **top}


def svc(**fields) -> dict:
    return {**SERVICE, **fields}


def problems(d: dict, source: str = SRC) -> list[str]:
    with pytest.raises(SpecError) as e:
        validate_class(source, d)
    assert e.value.problems, "a SpecError must carry at least one problem"
    return e.value.problems


def one_problem(d: dict) -> str:
    p = problems(d)
    assert len(p) == 1, p
    return p[0]


# --- the shipped group_data ------------------------------------------------------

@pytest.fixture(scope="module")
def shipped() -> dict[str, ClassSpec]:
    return load_class_specs(GROUP_DATA)


def test_shipped_group_data_validates(shipped):
    # every file but all.py is a class, or a gateway (fleet.gateway.smg, tested in test_gateway.py)
    assert set(shipped) == {p.stem for p in GROUP_DATA.glob("*.py")} - {"all", "gateway", "monitoring"}
    assert shipped, "group_data/ declares no GPU class"


def test_seed_case_is_expressed_by_pro6000(shipped):
    pro = shipped["pro6000"]
    assert pro.service.model_path == "/root/models/Qwen3.6-27B"
    assert isinstance(pro.speculative, DFlash)
    assert pro.speculative.algorithm == "DFLASH"
    assert pro.speculative.draft_model_path == "/root/models/Qwen3.6-27B-DFlash"
    assert pro.speculative.block_size == 16
    assert "dflash-train.service" in pro.workloads
    assert pro.model_paths == ["/root/models/Qwen3.6-27B", "/root/models/Qwen3.6-27B-DFlash"]
    assert "NVIDIA RTX PRO 6000 Blackwell Server Edition" in pro.gpu_class.accepted_models


def test_shipped_classes_take_all_py_defaults(shipped):
    # all.py's readiness/smoke reach every class (pyinfra's merge by top-level name)
    for spec in shipped.values():
        assert spec.readiness.load_timeout_s == 1200
        assert spec.smoke.max_tokens == 16


def test_seed_case_expressible_from_plain_data():
    spec = validate_class(
        SRC,
        {
            "gpu_class": {"accepted_models": ["NVIDIA RTX PRO 6000 Blackwell Server Edition"], "gpu_count": 1,
                          "min_memory_mib": 95000},
            "service": {"model_path": "/root/models/Qwen3.6-27B", "served_model_name": "qwen3.6-27b"},
            "speculative": {"algorithm": "DFLASH", "draft_model_path": "/root/models/Qwen3.6-27B-DFlash",
                            "block_size": 16},
            "workloads": ["dflash-train.service"],
        },
    )
    assert spec.speculative == DFlash(algorithm="DFLASH", draft_model_path="/root/models/Qwen3.6-27B-DFlash",
                                      block_size=16)
    assert spec.workloads == ["dflash-train.service"]


# --- defaults and derived values ------------------------------------------------

def test_defaults():
    spec = validate_class(SRC, data())
    assert spec.speculative == NoSpeculation(algorithm="none")
    assert spec.service.unit == "sglang"
    assert spec.service.host == "127.0.0.1"
    assert spec.service.port == 30000
    assert spec.service.api_key is None
    assert spec.unit_file == "/etc/systemd/system/sglang.service"
    assert spec.env_file == "/etc/sglang/sglang.env"
    assert spec.secret_file == "/etc/sglang/sglang.secret"
    assert spec.model_paths == ["/root/models/Qwen3-8B"]


def test_every_algorithm_tag_is_accepted():
    extra = {
        "none": {},
        "EAGLE": {},
        "EAGLE3": {"draft_model_path": "/d"},
        "NEXTN": {},
        "STANDALONE": {"draft_model_path": "/d"},
        "NGRAM": {},
        "DFLASH": {"draft_model_path": "/d"},
        "DDTREE": {"draft_model_path": "/d", "tree_budget": 64},
    }
    assert set(extra) == set(ALGORITHM_TAGS)
    for tag, fields in extra.items():
        spec = validate_class(SRC, data(speculative={"algorithm": tag, **fields}))
        assert spec.speculative.algorithm == tag


def test_spec_keys_are_the_top_level_names():
    assert set(SPEC_KEYS) == {"gpu_class", "service", "speculative", "workloads", "readiness", "smoke", "rolling", "engine", "hub", "tune", "canary"}


@pytest.mark.parametrize(
    "given, expected",
    [
        (["dflash-train"], ["dflash-train.service"]),
        (["dflash-train.service"], ["dflash-train.service"]),
        (["jupyter@root", "train.v2"], ["jupyter@root.service", "train.v2.service"]),  # as systemctl reads them
    ],
)
def test_workloads_normalized_to_service(given, expected):
    assert validate_class(SRC, data(workloads=given)).workloads == expected


def test_workloads_may_not_list_the_service_itself():
    # "sglang" is normalized to sglang.service first, then refused
    p = one_problem(data(workloads=["sglang"]))
    assert "workloads lists the service's own unit sglang.service" in p


def test_workload_with_bad_unit_name():
    p = one_problem(data(workloads=["dflash-train", "dflash train"]))
    assert p.startswith(f"{SRC}: workloads.1 = 'dflash train': a systemd unit name: ASCII letters, digits and ")


def test_connector_settings_are_not_spec():
    d = data(ssh_user="root", ssh_port=2222, _sudo=True)
    assert set(spec_data(d)) == {"gpu_class", "service"}
    validate_class(SRC, d)  # does not raise


# --- refusals: each names the file, the field, the value and what is allowed ----

@pytest.mark.parametrize(
    "speculative, field_value, allowed",
    [
        ({"algorithm": "MEDUSA"}, "speculative = {'algorithm': 'MEDUSA'}", "'DFLASH', 'DDTREE'"),
        ({"algorithm": "dflash", "draft_model_path": "/d"}, "'algorithm': 'dflash'", "expected tags: 'none'"),
        ({"algorithm": "DFLASH", "draft_model_path": "/d", "block_size": 0}, "speculative.block_size = 0",
         "greater than or equal to 1"),
        ({"algorithm": "DFLASH", "draft_model_path": "/d", "block_size": 17}, "speculative.block_size = 17",
         "less than or equal to 16"),
        ({"algorithm": "DDTREE", "draft_model_path": "/d", "tree_budget": 64, "block_size": 17},
         "speculative.block_size = 17", "less than or equal to 16"),
        ({"algorithm": "DDTREE", "draft_model_path": "/d", "tree_budget": 0}, "speculative.tree_budget = 0",
         "greater than or equal to 1"),
        ({"algorithm": "DFLASH", "draft_model_path": "drafts/x"}, "speculative.draft_model_path = 'drafts/x'",
         "an absolute path"),
        ({"algorithm": "EAGLE", "num_steps": 0}, "speculative.num_steps = 0", "greater than or equal to 1"),
    ],
)
def test_speculative_refusals(speculative, field_value, allowed):
    p = one_problem(data(speculative=speculative))
    assert p.startswith(f"{SRC}: ")
    assert field_value in p
    assert allowed in p
    assert "speculative.DFLASH" not in p and "speculative.DDTREE" not in p  # union tag left out of the path


@pytest.mark.parametrize("algorithm", ["DFLASH", "DDTREE"])
def test_dflash_family_needs_a_draft(algorithm):
    extra = {"tree_budget": 8} if algorithm == "DDTREE" else {}
    p = one_problem(data(speculative={"algorithm": algorithm, **extra}))
    assert p.startswith(f"{SRC}: speculative = ") and p.endswith(": exactly one of draft_model_path (a directory on "
                                                                  "the host, for weights placed by hand) and draft_model "
                                                                  "(a Hugging Face repository and commit the deploy "
                                                                  "fetches)"), p


def test_ddtree_requires_tree_budget():
    p = one_problem(data(speculative={"algorithm": "DDTREE", "draft_model_path": "/d"}))
    assert p == f"{SRC}: speculative.tree_budget: required, not given"


@pytest.mark.parametrize("algorithm", ["EAGLE3", "STANDALONE"])
def test_eagle3_and_standalone_need_a_draft(algorithm):
    p = one_problem(data(speculative={"algorithm": algorithm}))
    assert p.startswith(f"{SRC}: speculative = {{'algorithm': '{algorithm}'}}: ")
    assert f"{algorithm} needs draft_model_path" in p


@pytest.mark.parametrize("algorithm", ["EAGLE", "NEXTN"])
def test_eagle_and_nextn_may_omit_the_draft(algorithm):
    spec = validate_class(SRC, data(speculative={"algorithm": algorithm}))
    assert isinstance(spec.speculative, EagleFamily)
    assert spec.model_paths == [SERVICE["model_path"]]


@pytest.mark.parametrize("alone", [{"topk": 4}, {"num_draft_tokens": 8}])
def test_topk_or_draft_tokens_without_num_steps(alone):
    p = one_problem(data(speculative={"algorithm": "EAGLE3", "draft_model_path": "/d", **alone}))
    assert "speculative = " in p and repr(next(iter(alone.values()))) in p
    assert "topk and num_draft_tokens need num_steps" in p


def test_topk_1_draft_tokens_must_be_steps_plus_one():
    bad = {"algorithm": "EAGLE", "num_steps": 3, "topk": 1, "num_draft_tokens": 8}
    assert "num_draft_tokens must be num_steps + 1" in one_problem(data(speculative=bad))
    validate_class(SRC, data(speculative={**bad, "num_draft_tokens": 4}))


@pytest.mark.parametrize(
    "port, allowed", [(0, "greater than or equal to 1"), (70000, "less than or equal to 65535"), (-1, ">= 1")]
)
def test_port_range(port, allowed):
    p = one_problem(data(service=svc(port=port)))
    assert p.startswith(f"{SRC}: service.port = {port}: ")
    if allowed != ">= 1":
        assert allowed in p


def test_unknown_top_level_key_lists_allowed_keys():
    p = one_problem(data(prot=30001))
    assert p == (
        f"{SRC}: prot: unknown key (value 30001); allowed keys: "
        "gpu_class, service, speculative, workloads, readiness, smoke, rolling, engine, hub, tune, canary"
    )


def test_unknown_nested_key_lists_allowed_keys():
    p = one_problem(data(service=svc(prot=30001)))
    assert p.startswith(f"{SRC}: service.prot: unknown key (value 30001); allowed keys: ")
    allowed = p.split("allowed keys: ", 1)[1].split(", ")
    assert "port" in allowed and "model_path" in allowed and "api_key" in allowed


def test_unknown_key_in_gpu_class_and_readiness():
    p = one_problem(data(gpu_class={**GPU, "gpu_cuont": 2}))
    assert "gpu_class.gpu_cuont: unknown key" in p and "gpu_count" in p.split("allowed keys: ")[1]
    p = one_problem(data(readiness={"load_timeout": 5}))
    assert "readiness.load_timeout: unknown key" in p and "load_timeout_s" in p.split("allowed keys: ")[1]


def test_unknown_key_in_speculative_is_refused():
    p = one_problem(data(speculative={"algorithm": "DFLASH", "draft_model_path": "/d", "blok_size": 8}))
    assert p.startswith(f"{SRC}: speculative.blok_size: unknown key (value 8)")


def test_unknown_key_in_speculative_lists_allowed_keys():
    # the allowed keys are those of the model the algorithm selects
    p = one_problem(data(speculative={"algorithm": "DFLASH", "draft_model_path": "/d", "blok_size": 8}))
    assert p.endswith("; allowed keys: algorithm, draft_model_path, draft_model, block_size"), p
    p = one_problem(data(speculative={"algorithm": "NGRAM", "topk": 8}))
    assert p.startswith(f"{SRC}: speculative.topk: unknown key (value 8); allowed keys: ")
    assert "max_bfs_breadth" in p.split("allowed keys: ")[1]
    p = one_problem(data(speculative={"algorithm": "EAGLE3", "draft_model_path": "/d", "num_step": 3}))
    assert "num_steps" in p.split("allowed keys: ")[1]


@pytest.mark.parametrize("gpus, tp", [(2, 3), (1, 2), (4, 3), (8, 16)])
def test_tp_size_must_divide_gpu_count(gpus, tp):
    p = one_problem(data(gpu_class={**GPU, "gpu_count": gpus}, service=svc(tp_size=tp)))
    assert f"service.tp_size {tp} does not divide gpu_class.gpu_count {gpus}" in p


@pytest.mark.parametrize("gpus, tp", [(2, 1), (2, 2), (8, 4), (8, 8)])
def test_tp_size_dividing_gpu_count_is_fine(gpus, tp):
    spec = validate_class(SRC, data(gpu_class={**GPU, "gpu_count": gpus}, service=svc(tp_size=tp)))
    assert (spec.gpu_class.gpu_count, spec.service.tp_size) == (gpus, tp)


@pytest.mark.parametrize(
    "field, value",
    [("model_path", "models/Qwen3-8B"), ("model_path", "~/models/x"), ("launcher", "python3"),
     ("model_path", "")],
)
def test_relative_paths_refused(field, value):
    p = one_problem(data(service=svc(**{field: value})))
    assert p == f"{SRC}: service.{field} = {value!r}: an absolute path in normal form: starting with /, no empty, '.' or '..' segment (no //, no trailing /)"


def test_missing_required_fields():
    p = problems({"gpu_class": GPU, "service": {"served_model_name": "x"}})
    assert len(p) == 1 and p[0].startswith(f"{SRC}: service = ") and "exactly one of model_path" in p[0], p
    p = problems({"service": SERVICE})
    assert p == [f"{SRC}: gpu_class: required, not given"]


def test_all_problems_of_a_file_reported_together():
    p = problems(data(prot=1, service=svc(port=0, model_path="rel")))
    assert len(p) == 3
    assert any("prot: unknown key" in x for x in p)
    assert any("service.port = 0" in x for x in p)
    assert any("service.model_path = 'rel'" in x for x in p)


@pytest.mark.parametrize(
    "service_fields, needle",
    [
        ({"unit": "sglang.service"}, "service.unit = 'sglang.service'"),
        ({"unit": "sg lang"}, "service.unit = 'sg lang'"),
        ({"mem_fraction": 1.0}, "service.mem_fraction = 1.0"),
        ({"environment": {"1BAD": "x"}}, "'1BAD' is not a valid name"),
        ({"environment": {"A": "x\ny"}}, "service.environment.A = 'x\\ny': expected text without control "
         "characters, line separators or lone surrogates; found a control character (U+000A) at character 1"),
        ({"extra_args": ["--port=1"]}, "--port is service.port: set it there"),
        ({"extra_args": ["--speculative-algorithm", "EAGLE"]}, "--speculative-algorithm is speculative.algorithm"),
        ({"environment": {"NCCL_DEBUG": "x"}, "secret_environment": {"NCCL_DEBUG": {"env": "X"}}},
         "NCCL_DEBUG in both environment and secret_environment"),
        ({"secret_environment": {"1BAD": {"env": "X"}}}, "'1BAD' is not a valid name"),
        ({"host": "127.0.0.1; rm -rf /"}, "an IP address (e.g. 0.0.0.0, 127.0.0.1, ::) or a host name"),
        ({"host": "$(id)"}, "an IP address"),
        ({"host": ""}, "an IP address"),
        ({"host": "-bad.example"}, "an IP address"),
    ],
)
def test_service_refusals(service_fields, needle):
    p = one_problem(data(service=svc(**service_fields)))
    assert p.startswith(f"{SRC}: service")
    assert needle in p


def test_gpu_model_names_are_exact():
    p = one_problem(data(gpu_class={**GPU, "accepted_models": [" NVIDIA RTX A6000"]}))
    assert "must be an exact nvidia-smi name" in p
    assert one_problem(data(gpu_class={**GPU, "accepted_models": []})).startswith(
        f"{SRC}: gpu_class.accepted_models = []"
    )


# --- secrets: group_data names where they come from -------------------------------------

def test_a_secret_is_declared_by_its_source():
    spec = validate_class(SRC, data(service=svc(api_key={"env": "SGLANG_API_KEY_X"},
                                                admin_api_key={"file": "~/.config/x/admin.key"},
                                                secret_environment={"HF_TOKEN": {"env": "HF_TOKEN"}})))
    assert spec.service.api_key.describe() == "environment variable SGLANG_API_KEY_X"
    assert spec.service.admin_api_key.describe() == "file ~/.config/x/admin.key"
    assert list(spec.service.server_secrets) == ["api-key", "admin-api-key"]  # as SGLang's --config keys
    assert json.loads(spec.model_dump_json())["service"]["api_key"] == {"env": "SGLANG_API_KEY_X", "file": None}


@pytest.mark.parametrize("field", ["api_key", "admin_api_key"])
def test_a_secret_value_written_into_group_data_is_refused_without_showing_it(field):
    p = one_problem(data(service=svc(**{field: KEY})))
    assert p.startswith(f"{SRC}: service.{field} = '***': name where the secret comes from, not its value")
    assert KEY not in p


def test_a_secret_environment_value_written_into_group_data_is_refused_without_showing_it():
    p = one_problem(data(service=svc(secret_environment={"HF_TOKEN": KEY})))
    assert "service.secret_environment.HF_TOKEN = '***': name where the secret comes from" in p
    assert KEY not in p


@pytest.mark.parametrize("source, needle", [
    ({}, "exactly one of env"),
    ({"env": "A", "file": "/b"}, "exactly one of env"),
    ({"env": "not a name"}, "env is not an environment variable name: expected letters, digits and _"),
    ({"file": " "}, "file is empty"),
    ({"vault": "x"}, "unknown key"),
])
def test_a_malformed_source_is_refused(source, needle):
    assert needle in one_problem(data(service=svc(api_key=source)))


@pytest.mark.parametrize("tokens", [
    ["--api-key", "x"], ["--api-key=x"], ["--api_key", "x"], ["--api-k", "x"], ["--admin-api-key", "x"],
    ["--admin-api", "x"], ["--ssl-keyfile-password", "x"], ["--ssl-keyfile-pass=x"],
])
def test_secret_flags_are_refused_in_extra_args_abbreviated_too(tokens):
    """argparse (SGLang allows abbreviations) would read each of these as a secret flag; its value
    would be in the process's arguments, readable by every local user."""
    p = one_problem(data(service=svc(extra_args=tokens)))
    assert "would put a secret in the server's arguments, readable by every local user" in p
    assert ("service.api_key" in p) == tokens[0].startswith("--api")
    assert ("service.admin_api_key" in p) == tokens[0].startswith("--admin")


@pytest.mark.parametrize("tokens, needle", [
    (["--config", "/etc/x.yaml"], "--config: the server's --config is sglang-fleet's 0600 file"),
    (["--config=/etc/x.yaml"], "--config: the server's --config"),
    (["--watermark-config", '{"key": "s3cr3t"}'], "--watermark-config with inline JSON may carry a secret"),
    (['--watermark-config={"key": "s3cr3t"}'], "--watermark-config with inline JSON"),
    (["--hicache-storage-backend-extra-config", '{"secret_key": "x"}'], "--hicache-storage-backend-extra-config"),
])
def test_other_secret_bearing_extra_args_are_refused(tokens, needle):
    assert needle in one_problem(data(service=svc(extra_args=tokens)))


@pytest.mark.parametrize("tokens", [
    ["--ssl-keyfile", "/etc/ssl/k.pem"],  # a flag of its own, not an abbreviation of the password
    ["--watermark-config", "/etc/sglang/watermark.json"],  # a path is fine: the key stays in the file
    ["--log-level", "info"],
])
def test_harmless_neighbours_of_secret_flags_pass(tokens):
    assert validate_class(SRC, data(service=svc(extra_args=tokens))).service.extra_args == tokens


def test_a_secret_of_wrong_type_is_not_shown():
    p = one_problem(data(service=svc(api_key=123456789012)))
    assert "123456789012" not in p and "service.api_key" in p


def test_api_key_not_printed_when_another_field_fails():
    for d in (
        data(service=svc(api_key=KEY, port=0)),
        data(service=svc(api_key=KEY, prot=1)),
        data(service=svc(api_key=KEY), speculative={"algorithm": "NOPE"}),
        data(service=svc(api_key=KEY, tp_size=3)),  # a whole-spec error: its input is the whole data
    ):
        for p in problems(d):
            assert KEY not in p, p


def test_api_key_not_printed_by_whole_spec_error_when_service_comes_first():
    d = {"service": {"api_key": KEY, **SERVICE, "tp_size": 3}, "gpu_class": GPU}
    for p in problems(d):
        assert KEY not in p, p


def test_api_key_not_printed_under_a_misspelt_top_level_name():
    for p in problems(data(servce={"api_key": KEY, **SERVICE})):
        assert KEY not in p, p


def test_explain_strips_union_tag():
    try:
        ClassSpec.model_validate(data(speculative={"algorithm": "DDTREE", "draft_model_path": "/d",
                                                   "tree_budget": 2000}))
    except ValidationError as err:
        assert err.errors()[0]["loc"][:2] == ("speculative", "DDTREE")
        (p,) = explain(SRC, err)
        assert p.startswith(f"{SRC}: speculative.tree_budget = 2000: ")
    else:
        pytest.fail("tree_budget 2000 was accepted")


def test_models_are_frozen():
    spec = validate_class(SRC, data())
    with pytest.raises(ValidationError):
        spec.service.port = 1  # type: ignore[misc]


def test_ddtree_is_its_own_model():
    spec = validate_class(SRC, data(speculative={"algorithm": "DDTREE", "draft_model_path": "/d", "tree_budget": 64}))
    assert isinstance(spec.speculative, DDTree) and not isinstance(spec.speculative, DFlash)
    assert spec.speculative.algorithm == "DDTREE"


def test_eagle_num_steps_without_topk_is_refused():
    # real SGLang 0.5.23 crashes at start on it (tests/fixtures/sglang-0.5.23-resolve.txt, eagle-steps-only)
    with pytest.raises(ValidationError, match="num_steps needs topk"):
        ClassSpec.model_validate(data(speculative={"algorithm": "EAGLE", "num_steps": 3}))


# --- extra_args may not say what the spec owns, in any spelling SGLang's parser takes -------

# generated from the real 0.5.23 parser (lab/doubles/gen_sglang_flags.py): every action's option strings and dest
SGLANG_ACTIONS = json.loads((ROOT / "lab/doubles/sglang/flags.json").read_text())["actions"]
# The arguments the spec sets (server_arg_groups) or keeps out of the command line, by dest. DDTree's
# budget is PR 29907's flag, not 0.5.23's: the spec renders it, so an engine that has it is covered too.
OWNED_DESTS = {
    "model_path", "served_model_name", "host", "port", "tp_size", "mem_fraction_static", "context_length",
    "trust_remote_code", "enable_metrics", "speculative_algorithm", "speculative_draft_model_path",
    "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens",
    "speculative_ngram_max_bfs_breadth", "speculative_dflash_block_size", "speculative_ddtree_budget", "config",
    "api_key", "admin_api_key", "ssl_keyfile_password",
}
DEST_OF = {o: a["dest"] for a in SGLANG_ACTIONS for o in a["option_strings"]} | \
    {"--speculative-ddtree-budget": "speculative_ddtree_budget"}
LONG_OPTIONS = sorted(o for o in DEST_OF if o.startswith("--"))


def argparse_reads(name: str) -> str | None:
    """The dest argparse (allow_abbrev=True) gives the option `name`: an exact option string, else the
    one action all option strings starting with it belong to; None when none or several."""
    if name in DEST_OF:
        return DEST_OF[name]
    dests = {d for o, d in DEST_OF.items() if o.startswith(name)}
    return dests.pop() if len(dests) == 1 else None


def owned_spellings() -> dict[str, str]:
    """Every option name argparse reads as an owned dest: each prefix of each option string."""
    names = {o[:end] for o in LONG_OPTIONS for end in range(3, len(o) + 1)}
    return {n: argparse_reads(n) for n in sorted(names) if argparse_reads(n) in OWNED_DESTS}


def test_the_owned_flags_are_every_option_string_of_the_owned_arguments():
    owned = {o for o, d in DEST_OF.items() if d in OWNED_DESTS}
    assert set(SPEC_FLAGS) | set(SECRET_FLAGS) | {CONFIG_FLAG} == owned
    for option, field in SPEC_FLAGS.items():  # aliases name the same field
        assert {SPEC_FLAGS[o] for o, d in DEST_OF.items() if d == DEST_OF[option]} == {field}


def test_every_spelling_argparse_reads_as_an_owned_argument_is_refused():
    """Exact, `=value`, abbreviated (any prefix argparse resolves to the one action) and in the `_`
    spelling: each refused, naming the field to use instead."""
    spellings = owned_spellings()
    assert "--tp" in spellings and "--tensor-parallel" in spellings and "--speculative-draft-model" in spellings
    for name, dest in spellings.items():
        for tokens in ([name, "1"], [f"{name}=1"], ["--" + name[2:].replace("-", "_"), "1"]):
            p = one_problem(data(service=svc(extra_args=tokens)))
            assert p.startswith(f"{SRC}: service.extra_args = "), p
            field = next((f for o, f in {**SPEC_FLAGS, **SECRET_FLAG_FIELDS}.items() if DEST_OF[o] == dest), None)
            if field:  # a spec field is set there; a secret is declared in its field (never passed as a value)
                said = f"declare it in {field}" if field in SECRET_FLAG_FIELDS.values() else f"{field}: set it there"
                assert said in p, (tokens, p)


def test_every_other_sglang_flag_passes():
    """The flags the spec does not own stay usable, the exact ones that prefix an owned flag too
    (NOT_ABBREVIATIONS): --speculative-attention-mode, --ssl-keyfile, --enable-metrics-for-all-schedulers."""
    others = [o for o in LONG_OPTIONS if DEST_OF[o] not in OWNED_DESTS]
    assert {"--speculative-attention-mode", "--speculative-token-map", "--speculative-draft-model-revision",
            "--enable-metrics-for-all-schedulers", *NOT_ABBREVIATIONS} <= set(others)
    for flag in others:
        assert validate_class(SRC, data(service=svc(extra_args=[flag, "/etc/sglang/v"]))), flag


def test_not_abbreviations_are_the_flags_that_prefix_a_flag_read_by_prefix():
    by_prefix = [*SPEC_FLAGS, *SECRET_FLAGS, CONFIG_FLAG, *INLINE_SECRET_FLAGS]
    assert sorted(o for o in LONG_OPTIONS if o not in by_prefix and any(f.startswith(o) for f in by_prefix)) == \
        sorted(NOT_ABBREVIATIONS)


@pytest.mark.parametrize("tokens, message", [
    (["--tensor-parallel-size", "2"], "--tensor-parallel-size is service.tp_size: set it there"),
    (["--tp", "2"], "--tp (read as --tp-size) is service.tp_size: set it there"),
    (["--model=/root/models/other"], "--model is service.model_path: set it there"),
    (["--mem-fraction-static", "1.5"], "--mem-fraction-static is service.mem_fraction: set it there"),
    (["--speculative-draft-model", "/d"], "--speculative-draft-model is speculative.draft_model_path"),
    (["--speculative-ddtree-budget", "8"], "--speculative-ddtree-budget is speculative.tree_budget"),
    (["--served_model_name", "x"], "--served_model_name (read as --served-model-name) is service.served_model_name"),
    (["--trust-remote-code"], "--trust-remote-code is service.trust_remote_code"),
])
def test_an_owned_flag_names_the_field_to_set_instead(tokens, message):
    p = one_problem(data(service=svc(extra_args=tokens)))
    assert message in p and "SGLang keeps the last value given" in p


@pytest.mark.parametrize("host", ["0.0.0.0", "127.0.0.1", "::", "::1", "fd00::5", "10.1.2.3", "gpu-box-1", "a.example.org"])
def test_service_host_takes_addresses_and_names(host):
    assert validate_class(SRC, data(service=svc(host=host))).service.host == host


@pytest.mark.parametrize("host", ["fe80::1%eth0", "fe80::1%$(id)", "fe80::1%a b"])
def test_an_address_with_a_zone_is_refused(host):
    # Python's parser takes any text after the %: it would reach URLs and shell commands
    assert "without a zone" in one_problem(data(service=svc(host=host)))


# --- names systemd takes: service.unit, workloads ----------------------------------------------

@pytest.mark.parametrize("unit", ["..", ".", ".hidden", "-H", "-Hhost", "a@b", "sg lang", "a/b", "a%n", "é",
                                  "x" * 248, ""])
def test_service_unit_names_systemd_would_not_take_or_that_escape_their_directory(unit):
    p = one_problem(data(service=svc(unit=unit)))
    assert p.startswith(f"{SRC}: service.unit = {unit[:60]!r}"[:60]), p
    assert "a systemd unit name" in p


@pytest.mark.parametrize("unit", ["sglang-b", "sglang_2", "a:b", "a\\x2db", "x" * 227, "Sglang.v2"])
def test_service_unit_names_systemd_takes(unit):
    spec = validate_class(SRC, data(service=svc(unit=unit)))
    assert spec.service_unit == f"{unit}.service" and len(spec.service_unit) <= 255


@pytest.mark.parametrize("workload, needle", [
    ("backup.timer", "a .service unit; found a .timer: a name here is a service's (a scope is a table"),
    ("docker-ab.scope", "found a .scope: a name here is a service's (a scope is a table with name, scope and "
                        "give_back)"),
    ("data.mount", "found a .mount"),
    ("-H", "not starting with - or ."),
    ("..", "not starting with - or ."),
    (".service", "a systemd unit name"),
    ("jupyter@.service", "'@' only as in name@instance"),
    ("@x", "'@' only as in name@instance"),
    ("x" * 248, "at most 255 characters with .service; found 256"),
])
def test_workloads_systemd_would_not_take(workload, needle):
    p = one_problem(data(workloads=[workload]))
    assert p.startswith(f"{SRC}: workloads.0 = ") and needle in p, p


def test_a_workload_listed_twice_is_refused():
    p = one_problem(data(workloads=["train", "train.service"]))
    assert p == f"{SRC}: workloads = ['train', 'train.service']: each workload once; found train.service more than once"


# --- workloads that are not services: scopes and processes ------------------------------------

SCOPE = {"name": "trainer", "scope": "docker-*.scope", "give_back": ["/usr/bin/docker", "start", "trainer"]}
PROCESS = {"name": "torchrun", "command_line": "*torchrun*train.py*", "give_back": False}


def test_a_workload_is_a_service_a_scope_or_processes():
    spec = validate_class(SRC, data(workloads=["dflash-train", SCOPE, PROCESS,
                                               {"name": "smi", "process_name": "/usr/bin/python3", "give_back": False,
                                                "kill_after_s": 5}]))
    scope, process, by_name = spec.held_workloads
    assert spec.workloads[0] == "dflash-train.service" and spec.service_workloads == ["dflash-train.service"]
    assert (scope.name, scope.scope, scope.give_back) == ("trainer", "docker-*.scope", tuple(SCOPE["give_back"]))
    assert (process.name, process.command_line, process.process_name, process.kill_after_s, process.give_back) == (
        "torchrun", "*torchrun*train.py*", None, 30, False)
    assert (by_name.process_name, by_name.kill_after_s) == ("/usr/bin/python3", 5)
    assert spec.watched_units == ["sglang.service", "dflash-train.service"]  # systemd knows the services only
    assert spec.workload("trainer") is scope and spec.workload("dflash-train.service") == "dflash-train.service"
    # what spec.json records is read back as the same spec (make rollback validates it again)
    assert ClassSpec.model_validate(json.loads(spec.model_dump_json())) == spec == ClassSpec.model_validate(spec)


def test_what_a_scope_or_process_workload_matches():
    scope = validate_class(SRC, data(workloads=[SCOPE, PROCESS])).held_workloads
    assert scope[0].matches("docker-0123abcd.scope", "python", None)
    assert not scope[0].matches("docker-0123abcd.service", "python", None)  # a scope pattern names scopes only
    assert not scope[0].matches("libpod-0123.scope", "python", None) and not scope[0].matches(None, "x", None)
    assert scope[1].matches("session-3.scope", "python", "/usr/bin/python3 /usr/bin/torchrun train.py --lr 1")
    assert not scope[1].matches("session-3.scope", "torchrun train.py", None)  # its command line unknown


@pytest.mark.parametrize("pattern, text, matches", [
    ("docker-*.scope", "docker-.scope", True), ("a?c", "abc", True), ("a?c", "ac", False), ("*", "", True),
    ("*a*b", "xaybzb", True), ("*a*b", "xaybz", False), ("a[1]", "a[1]", True), ("a[1]", "a1", False),
    ("a.c", "abc", False), ("a*", "a\nb", True), ("*x", "ab", False), ("ab", "abc", False), ("a**", "a", True),
])
def test_a_pattern_is_a_glob_of_star_and_question_mark_only(pattern, text, matches):
    assert glob_matches(pattern, text) is matches


def test_a_pattern_against_a_long_hostile_text_costs_at_most_pattern_times_text():
    assert glob_matches("*a*a*a*a*a*a*a*a*b", "a" * 8192) is False  # a regex of .* would backtrack for ages


@pytest.mark.parametrize("workload, where, needle", [
    ({"name": "x"}, "workloads.0 = ", "expected a service's unit name (e.g. 'dflash-train'), or a table with `scope`"),
    (5, "workloads.0 = 5", "expected a service's unit name"),
    ({**SCOPE, "give_back": None}, "workloads.0.scope.give_back.command = None", "false (it is not given back) or "
     "the command that starts it again, an argv list such as ['/usr/bin/docker', 'start', 'trainer']"),
    ({k: v for k, v in SCOPE.items() if k != "give_back"}, "workloads.0.scope.give_back", "required, not given"),
    ({**SCOPE, "give_back": True}, "workloads.0.scope.give_back.command = True", "false (it is not given back)"),
    ({**SCOPE, "give_back": 0}, "workloads.0.scope.give_back.command = 0", "false (it is not given back)"),
    ({**SCOPE, "give_back": "false"}, "workloads.0.scope.give_back.command = 'false'", "an argv list"),
    ({**SCOPE, "give_back": []}, "workloads.0.scope.give_back.command = []", "at least 1 item"),
    ({**SCOPE, "give_back": ["docker", "start"]}, "workloads.0.scope.give_back.command = ['docker', 'start']",
     "its first element, the program, as an absolute path in normal form"),
    ({**SCOPE, "give_back": ["/bin/x"] * 65}, "workloads.0.scope.give_back.command = ", "at most 64 items"),
    ({**SCOPE, "give_back": ["/bin/x", "a\nb"]}, "workloads.0.scope.give_back.command.1 = 'a\\nb'",
     "found a control character (U+000A)"),
    ({**SCOPE, "name": "train er"}, "workloads.0.scope.name = 'train er'", "a name of ASCII letters, digits, - and _"),
    ({**SCOPE, "name": "t.service"}, "workloads.0.scope.name = 't.service'", "a name of ASCII letters"),
    ({**SCOPE, "name": "x" * 65}, "workloads.0.scope.name = ", "at most 64 characters"),
    ({**SCOPE, "scope": "docker-*"}, "workloads.0.scope.scope = 'docker-*'", "a scope's unit name ending in .scope"),
    ({**SCOPE, "scope": "-H*.scope"}, "workloads.0.scope.scope = '-H*.scope'", "not starting with - or ."),
    ({**SCOPE, "scope": "docker *.scope"}, "workloads.0.scope.scope = ", "a scope's unit name"),
    ({**SCOPE, "scope": "*.scope"}, "workloads.0.scope.scope = '*.scope'", "matches every scope, ssh logins' "
     "session-N.scope too"),
    ({**SCOPE, "scope": "?*.scope"}, "workloads.0.scope.scope = ", "matches every scope"),
    ({**SCOPE, "scope": "x" * 250 + ".scope"}, "workloads.0.scope.scope = ", "at most 255 characters"),
    ({**SCOPE, "kill_after_s": 5}, "workloads.0.scope.kill_after_s", "unknown key"),
    ({**PROCESS, "process_name": "python"}, "workloads.0.process = ", "exactly one of process_name"),
    ({"name": "x", "give_back": False, "command_line": None}, "workloads.0.process = ", "exactly one of"),
    ({**PROCESS, "command_line": "*?*"}, "workloads.0.process.command_line = '*?*'", "matches every process"),
    ({**PROCESS, "command_line": "a" * 1025}, "workloads.0.process.command_line = ", "at most 1024 characters"),
    ({**PROCESS, "command_line": "a\tb"}, "workloads.0.process.command_line = ", "a control character"),
    ({**PROCESS, "kill_after_s": 0}, "workloads.0.process.kill_after_s = 0", "greater than or equal to 1"),
    ({**PROCESS, "kill_after_s": 601}, "workloads.0.process.kill_after_s = 601", "less than or equal to 600"),
    ({**PROCESS, "kill_after_s": float("nan")}, "workloads.0.process.kill_after_s = nan", "finite number"),
])
def test_a_scope_or_process_workload_of_the_wrong_shape_is_refused_naming_the_field(workload, where, needle):
    p = one_problem(data(workloads=[workload]))
    assert p.startswith(f"{SRC}: {where}") and needle in p, p


def test_every_workload_name_once_whatever_its_kind():
    p = one_problem(data(workloads=[SCOPE, {**PROCESS, "name": "trainer"}]))
    assert p.startswith(f"{SRC}: workloads = ") and p.endswith("each workload once; found trainer more than once")


def test_the_workload_fields_hold_no_name_that_masks_a_secret():
    from fleet.spec.load import may_hold_a_secret

    names = set(ScopeWorkload.model_fields) | set(ProcessWorkload.model_fields)
    assert not {n for n in names if may_hold_a_secret(n)}


# --- text: no control characters, separators or lone surrogates anywhere a string goes -------

HOSTILE_CHARS = {"CR": "\r", "LF": "\n", "NUL": "\x00", "TAB": "\t", "ESC": "\x1b", "DEL": "\x7f", "NEL": "\x85",
                 "LS": "\u2028", "PS": "\u2029", "lone surrogate": "\ud800"}
TEXT_FIELDS = {
    "service.model_path": lambda v: data(service=svc(model_path=f"/m/{v}")),
    "service.launcher": lambda v: data(service=svc(launcher=f"/opt/{v}")),
    "service.served_model_name": lambda v: data(service=svc(served_model_name=f"q{v}")),
    "service.extra_args.1": lambda v: data(service=svc(extra_args=["--log-level", f"info{v}"])),
    "service.environment.NCCL_DEBUG": lambda v: data(service=svc(environment={"NCCL_DEBUG": f"WARN{v}"})),
    "gpu_class.accepted_models.0": lambda v: data(gpu_class={**GPU, "accepted_models": [f"NVIDIA{v}A6000"]}),
    "speculative.draft_model_path": lambda v: data(speculative={"algorithm": "DFLASH", "draft_model_path": f"/d{v}"}),
    "smoke.prompt": lambda v: data(smoke={"prompt": f"Say hi.{v}"}),
    "service.api_key.file": lambda v: data(service=svc(api_key={"file": f"~/k{v}"})),
}


@pytest.mark.parametrize("char", list(HOSTILE_CHARS))
@pytest.mark.parametrize("field", list(TEXT_FIELDS))
def test_control_characters_and_separators_are_refused_in_every_text_field(field, char):
    p = one_problem(TEXT_FIELDS[field](HOSTILE_CHARS[char]))
    assert p.startswith(f"{SRC}: {field} = "), p
    if char == "lone surrogate":  # pydantic refuses it first, as it is no Unicode string at all
        assert "unable to parse raw data as a unicode string" in p
    else:
        assert "expected text without control characters, line separators or lone surrogates; found" in p
        assert f"U+{ord(HOSTILE_CHARS[char]):04X}" in p
    assert HOSTILE_CHARS[char] not in p  # shown escaped: a message is one line too


@pytest.mark.parametrize("prompt", ["Dis bonjour en une phrase. 😀", "用一句话打招呼。", "Say 'hi' \\ \"bye\" $(id) `x` %n"])
def test_the_prompt_keeps_ordinary_unicode(prompt):
    assert validate_class(SRC, data(smoke={"prompt": prompt})).smoke.prompt == prompt


def test_the_longest_prompt_and_name_keep_the_smoke_request_inside_one_argument():
    """The smoke command is one `sh -c` argument (128 KiB at most) carrying the JSON body, which
    escapes a character outside the BMP as two \\uXXXX (12 bytes)."""
    from fleet.rollout.gate import smoke_command

    spec = validate_class(SRC, data(service=svc(served_model_name="😀" * NAME_MAX),
                                    smoke={"prompt": "😀" * PROMPT_MAX}))
    body = json.dumps({"model": spec.service.served_model_name,
                       "messages": [{"role": "user", "content": spec.smoke.prompt}]})
    assert len(body.encode()) < 64 * 1024
    assert len(smoke_command(spec).encode()) < 128 * 1024
    p = one_problem(data(smoke={"prompt": "x" * (PROMPT_MAX + 1)}))
    assert p.startswith(f"{SRC}: smoke.prompt = 'xxx") and f"at most {PROMPT_MAX} characters" in p
    p = one_problem(data(service=svc(served_model_name="x" * (NAME_MAX + 1))))
    assert f"at most {NAME_MAX} characters" in p


@pytest.mark.parametrize("path", ["/root/models/../etc", "/..", "/a/b/..", "/a//b", "/a/./b", "/a/b/", "/", "//a"])
def test_an_absolute_path_is_in_normal_form(path):
    """systemd refuses an ExecStart= command that is not (path_is_normalized); preflight compares paths
    as strings: one spelling each."""
    assert "no empty, '.' or '..' segment" in one_problem(data(service=svc(model_path=path)))
    assert "no empty, '.' or '..' segment" in one_problem(data(service=svc(launcher=path)))


@pytest.mark.parametrize("path", ["/" + "x" * 256, "/é" * 2048])
def test_an_absolute_path_fits_linux(path):
    assert "a path Linux can hold: at most 4095 bytes, 255 a segment" in one_problem(data(service=svc(model_path=path)))


@pytest.mark.parametrize("path", ["/root/models/a..b", "/root/models/..x", "/a b/c$d/back\\slash/é"])
def test_dots_inside_a_name_spaces_and_backslashes_are_paths_still(path):
    assert validate_class(SRC, data(service=svc(model_path=path))).service.model_path == path


def test_a_served_name_may_not_look_like_a_flag():
    # SGLang's parser would take it for an option: --served-model-name would have no value
    assert "not starting with '-'" in one_problem(data(service=svc(served_model_name="--model=/x")))


# --- numbers: finite, bounded, each bound in its description -----------------------------------

def _numeric_fields():
    from fleet.spec.docs import SECTIONS

    for title, model in SECTIONS:
        for name, field in model.model_fields.items():
            kinds = {a for a in typing.get_args(field.annotation)} | {field.annotation}
            if kinds & {int, float} and bool not in kinds:
                yield model, name, field


def _bounds(field) -> tuple:
    lo = next(m.ge for m in field.metadata if hasattr(m, "ge"))
    hi = next(m.le for m in field.metadata if hasattr(m, "le"))
    return lo, hi


def test_every_number_has_bounds_its_description_states():
    fields = list(_numeric_fields())
    assert len(fields) > 25
    for model, name, field in fields:
        lo, hi = _bounds(field)
        assert "..".join(str(b) if isinstance(b, int) else f"{b:g}" for b in (lo, hi)) in field.description, (model.__name__, name, field.description)
        if field.default not in (None, PydanticUndefined):
            assert lo <= field.default <= hi, (model.__name__, name)


FLOAT_FIELDS = {
    "service.mem_fraction": lambda v: data(service=svc(mem_fraction=v)),
    "service.drain_timeout_s": lambda v: data(service=svc(drain_timeout_s=v)),
    **{f"readiness.{k}": (lambda k: lambda v: data(readiness={k: v}))(k)
       for k in ("load_timeout_s", "poll_interval_s", "progress_every_s", "workload_release_timeout_s",
                 "command_timeout_s")},
    "smoke.timeout_s": lambda v: data(smoke={"timeout_s": v}),
}


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan"), "inf", "nan", 1e-9, 1e9])
@pytest.mark.parametrize("field", list(FLOAT_FIELDS))
def test_no_infinite_nan_or_absurd_duration(field, value):
    p = one_problem(FLOAT_FIELDS[field](value))
    assert p.startswith(f"{SRC}: {field} = "), p
    if isinstance(value, str):  # a number is written as one
        assert p.endswith("expected a number written as one (0.9 or 120, not '0.9' or True), found str"), p
    else:
        said = {1e-9: "greater than or equal to", 1e9: "less than or equal to"}.get(value, "finite number")
        assert said in p, p


def test_the_lab_tests_short_timeouts_still_validate():
    """tests/lab override readiness with short waits (load 8 s, polls of 0.25 s, progress every 2 s,
    4 s commands): bounds sized for hosts must not refuse a fast lab."""
    spec = validate_class(SRC, data(readiness={"load_timeout_s": 8, "poll_interval_s": 0.25, "progress_every_s": 2,
                                               "workload_release_timeout_s": 30, "command_timeout_s": 4},
                                    smoke={"timeout_s": 5, "max_tokens": 4}))
    assert spec.readiness.poll_interval_s == 0.25


# --- secrets in messages -----------------------------------------------------------------------

@pytest.mark.parametrize("name", ["HF_TOKEN", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "MY_PASSWD",
                                  "GH_CREDENTIALS", "X_APIKEY", "hf_token", "HfToken", "KEY"])
def test_an_environment_variable_named_as_a_secret_goes_to_secret_environment(name):
    p = one_problem(data(service=svc(environment={name: KEY})))
    assert p.startswith(f"{SRC}: service.environment = {{'{name}': '***'}}: {name} names a secret"), p
    assert f"service.secret_environment, e.g. {{'{name}': {{'env': '{name}'}}}}" in p
    assert KEY not in p


@pytest.mark.parametrize("name", ["TOKENIZERS_PARALLELISM", "NCCL_DEBUG", "HF_HOME", "KEYBOARD_LAYOUT", "MONKEY"])
def test_an_environment_variable_that_only_looks_alike_is_plain_environment(name):
    assert validate_class(SRC, data(service=svc(environment={name: "1"}))).service.environment == {name: "1"}


@pytest.mark.parametrize("where", [
    lambda v: data(service=svc(**{"api-key": v})),
    lambda v: data(service=svc(API_KEY=v)),
    lambda v: data(service=svc(apiKey=v)),
    lambda v: data(service=svc(hftoken=v)),
    lambda v: data(service=svc(Password=v)),
    lambda v: data(service=svc(secret=v)),
    lambda v: data(service=svc(token=v)),
    lambda v: data(HF_TOKEN=v),
    lambda v: data(readiness={"ssl-keyfile-password": v}),
    lambda v: data(service=svc(environment={"HF_TOKEN": v + "\n"})),  # refused for its newline: not shown either
    lambda v: data(service=svc(secret_environment={"HF_TOKEN": {"env": v}})),
    lambda v: data(service=svc(extra_args=["--api-key", v])),
    lambda v: data(service=svc(extra_args=["--api-key=" + v])),
    lambda v: data(service=svc(extra_args=["--admin-api", v, "--tp-size", "2"])),
    lambda v: data(service=svc(extra_args=["--watermark-config", '{"key": "' + v + '"}'])),
    lambda v: data(service=svc(extra_args=["--hf-token", v + "\x00"])),  # a flag named as a secret, a bad value
    lambda v: data(service=svc(extra_args=["--hf-token=" + v + "\x00"])),
    lambda v: data(service=svc(extra_args=["--log-level", "info", "--api-key", v, 5])),
])
def test_a_secret_is_never_shown_wherever_it_was_put(where):
    for p in problems(where(KEY)):
        assert KEY not in p and KEY[:12] not in p, p


def test_extra_args_in_a_refusal_show_a_secret_flags_value_masked():
    p = one_problem(data(service=svc(extra_args=["--log-level", "info", "--api-key", KEY])))
    assert p.startswith(f"{SRC}: service.extra_args = ['--log-level', 'info', '--api-key', '***']: ")


def test_only_the_secret_fields_of_the_spec_are_masked_by_name():
    """A message masks the value of a key that may hold a secret: the spec's own fields must not
    look like one (max_tokens, num_draft_tokens stay visible)."""
    from fleet.spec.docs import SECTIONS
    from fleet.spec.load import may_hold_a_secret

    names = {n for _, model in SECTIONS for n in model.model_fields} | set(SPEC_KEYS)
    assert {n for n in names if may_hold_a_secret(n)} == {"api_key", "admin_api_key", "secret_environment",
                                                          "password", "key"}  # VRRP's password, the mesh's TLS key


@pytest.mark.parametrize("where, field", [
    (lambda: data(service=svc(host="gpu-1\n")), "service.host"),
    (lambda: data(service=svc(unit="sglang\n")), "service.unit"),
    (lambda: data(workloads=["train\n"]), "workloads.0"),
    (lambda: data(service=svc(environment={"A\n": "1"})), "service.environment"),
    (lambda: data(service=svc(secret_environment={"A\n": {"env": "A"}})), "service.secret_environment"),
    (lambda: data(service=svc(api_key={"env": "A\n"})), "service.api_key"),
])
def test_a_final_newline_does_not_slip_past_a_pattern(where, field):
    """`$` in a pattern also matches before a final newline: each name is matched to its very end."""
    assert one_problem(where()).startswith(f"{SRC}: {field}")


@pytest.mark.parametrize("launcher, found", [("/opt/$x/python", "$"), ("/opt/a\\b/python", "\\"),
                                             ('/opt/"q"/python', '"'), ("/opt/it's/python", "'")])
def test_the_launcher_is_a_path_execstart_runs(launcher, found):
    """systemd refuses quotes and backslashes in ExecStart='s command and expands no $ there."""
    p = one_problem(data(service=svc(launcher=launcher)))
    assert p.startswith(f"{SRC}: service.launcher = ") and f"a path ExecStart= runs: none of \\ \" ' $; found {found}" in p


def test_an_unknown_algorithm_is_shown_on_one_line_and_short():
    p = one_problem(data(speculative={"algorithm": "X\n" * 500}))
    assert "\n" not in p and len(p) < 500
    assert "is none of the expected tags: 'none', 'EAGLE'" in p


@pytest.mark.parametrize("tokens, needle", [
    (["--API-KEY", "x"], "--API-KEY (read as --api-key) would put a secret in the server's arguments"),
    (["--Admin-Api-Key=x"], "would put a secret in the server's arguments"),
    (["--hf-api-key", "x"], "--hf-api-key names a secret: its value would be in the server's arguments"),
    (["--aws_secret", "x"], "--aws_secret names a secret"),
    (["--TP-SIZE", "2"], "--TP-SIZE (read as --tp-size) is service.tp_size"),
])
def test_a_flag_in_another_case_or_named_as_a_secret_is_refused(tokens, needle):
    """SGLang's flags are all lower case: --API-KEY is a mistaken --api-key whose value is a key all
    the same (SGLang would refuse it at start, and print it)."""
    assert needle in one_problem(data(service=svc(extra_args=tokens)))
