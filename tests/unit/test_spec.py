"""fleet.spec and fleet.groupdata on good and bad data, no hosts.

The shipped group_data must validate and express the seed case; every refusal must
name the field, the value and what is allowed; the API key must never be printed.
Broken group_data *files* (file name in the message, `make check`'s exit code) are
covered in test_check.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from fleet.groupdata import SpecError, explain, load_class_specs, spec_data, validate_class
from fleet.spec import (
    ALGORITHM_TAGS,
    NOT_ABBREVIATIONS,
    SECRET_FLAGS,
    SPEC_KEYS,
    ClassSpec,
    DDTree,
    DFlash,
    EagleFamily,
    NoSpeculation,
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
    # every file but all.py is a class, or a gateway (fleet.gateway, tested in test_gateway.py)
    assert set(shipped) == {p.stem for p in GROUP_DATA.glob("*.py")} - {"all", "gateway"}
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
    assert set(SPEC_KEYS) == {"gpu_class", "service", "speculative", "workloads", "readiness", "smoke"}


@pytest.mark.parametrize(
    "given, expected",
    [
        (["dflash-train"], ["dflash-train.service"]),
        (["dflash-train.service"], ["dflash-train.service"]),
        (["backup.timer", "jupyter@root"], ["backup.timer", "jupyter@root.service"]),
    ],
)
def test_workloads_normalized_to_service(given, expected):
    assert validate_class(SRC, data(workloads=given)).workloads == expected


def test_workloads_may_not_list_the_service_itself():
    # "sglang" is normalized to sglang.service first, then refused
    p = one_problem(data(workloads=["sglang"]))
    assert "workloads lists the service's own unit sglang.service" in p


def test_workload_with_bad_unit_name():
    p = one_problem(data(workloads=["dflash train"]))
    assert p.startswith(f"{SRC}: workloads = ")
    assert "'dflash train' is not a systemd unit name" in p


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
    assert p == f"{SRC}: speculative.draft_model_path: required, not given"


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
        "gpu_class, service, speculative, workloads, readiness, smoke"
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
    assert p.endswith("; allowed keys: algorithm, draft_model_path, block_size"), p
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
    validate_class(SRC, data(gpu_class={**GPU, "gpu_count": gpus}, service=svc(tp_size=tp)))


@pytest.mark.parametrize(
    "field, value",
    [("model_path", "models/Qwen3-8B"), ("model_path", "~/models/x"), ("launcher", "python3"),
     ("model_path", "")],
)
def test_relative_paths_refused(field, value):
    p = one_problem(data(service=svc(**{field: value})))
    assert p == f"{SRC}: service.{field} = {value!r}: an absolute path"


def test_missing_required_fields():
    p = problems({"gpu_class": GPU, "service": {"served_model_name": "x"}})
    assert p == [f"{SRC}: service.model_path: required, not given"]
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
        ({"environment": {"A": "x\ny"}}, "environment variable A holds a newline"),
        ({"extra_args": ["--port=1"]}, "--port is set by its own field"),
        ({"extra_args": ["--speculative-algorithm", "EAGLE"]}, "--speculative-algorithm is set by its own field"),
        ({"environment": {"HF_TOKEN": "x"}, "secret_environment": {"HF_TOKEN": {"env": "HF_TOKEN"}}},
         "HF_TOKEN in both environment and secret_environment"),
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
    ({"env": "not a name"}, "env 'not a name' is not an environment variable name"),
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


def _sglang_0523_long_flags() -> list[str]:
    # generated from the real 0.5.23 parser (lab/doubles/gen_sglang_flags.py)
    actions = json.loads((Path(__file__).resolve().parents[2] / "lab/doubles/sglang/flags.json").read_text())["actions"]
    return [o for a in actions for o in a["option_strings"] if o.startswith("--")]


def test_every_abbreviation_argparse_reads_as_a_secret_flag_is_refused():
    """SGLang's parser allows abbreviations: every prefix that is no flag of its own and names one
    flag only reaches that flag. Each of those that reaches a secret flag must be refused."""
    flags = _sglang_0523_long_flags()
    assert set(SECRET_FLAGS) <= set(flags)
    assert sorted(f for f in flags if f not in SECRET_FLAGS and any(s.startswith(f) for s in SECRET_FLAGS)) == \
        sorted(NOT_ABBREVIATIONS)
    for secret in SECRET_FLAGS:
        for end in range(4, len(secret) + 1):
            prefix = secret[:end]
            reaches = [f for f in flags if f.startswith(prefix)]
            if prefix in flags and prefix != secret:
                continue  # a flag of its own (NOT_ABBREVIATIONS)
            if prefix == secret or reaches == [secret]:
                p = one_problem(data(service=svc(extra_args=[prefix, "v"])))
                assert "would put a secret in the server's arguments" in p, prefix


@pytest.mark.parametrize("host", ["0.0.0.0", "127.0.0.1", "::", "::1", "fd00::5", "10.1.2.3", "gpu-box-1", "a.example.org"])
def test_service_host_takes_addresses_and_names(host):
    assert validate_class(SRC, data(service=svc(host=host))).service.host == host
