"""Hostile values that passed validation (issue 28, "Left from hostile input"): each is refused naming
its field and file, and no message shows a secret; or, read from a host, judged without a stall."""

from __future__ import annotations

import json
import typing
from dataclasses import replace

import pytest
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic.types import Strict as StrictFlag

from builders import SPEC, converged, secrets_of
from fleet import spec
from fleet.core import layout
from fleet.gateway import models as gateway
from fleet.tune import search as tune
from fleet.spec.inventory import check_inventory
from fleet.spec.load import SpecError, load_class_specs, validate_gateway
from fleet.rollout.plan import declared_files, plan
from fleet.spec import SERVICE_UNIT_MAX, ClassSpec
from fleet.core.wire import BLOCK_LIMIT, JSON_DEPTH, Unreadable, load_json
from test_check import ROOT, class_file, make_group_dir
from test_spec import KEY, SRC, data, one_problem, svc

# --- 1. a key pasted as a secret's source -------------------------------------------------------

TOKEN_NAME = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"  # a Hugging Face token: a name by the letters it uses


@pytest.mark.parametrize("source", [{"file": KEY}, {"file": "~" + KEY}, {"file": "/" + "A" * 300},
                                    {"env": TOKEN_NAME}, {"env": "A" * 129}])
@pytest.mark.parametrize("where, place", [
    ("service.api_key", lambda s: data(service=svc(api_key=s))),
    ("service.secret_environment.HF_TOKEN", lambda s: data(service=svc(secret_environment={"HF_TOKEN": s}))),
    ("hub.token", lambda s: data(hub={"token": s})),
])
def test_a_secret_pasted_as_its_source_is_refused_unshown(source, where, place):
    p = one_problem(place(source))
    assert p.startswith(f"{SRC}: {where} = '***': ") and "(not shown: it may be the secret itself)" in p, p
    assert ("file is not an absolute file path" if "file" in source else "env is not an environment variable") in p
    assert KEY not in p and TOKEN_NAME not in p and "A" * 100 not in p


@pytest.mark.parametrize("source", [{"file": "~/.config/sglang-fleet/pro6000.admin"}, {"file": "/run/secrets/key"},
                                    {"env": "HF_TOKEN"}, {"env": "https_proxy_key"}, {"env": "_K2"}])
def test_a_source_of_the_usual_shape_passes(source):
    assert ClassSpec.model_validate(data(service=svc(api_key=source))).service.api_key.model_dump(
        exclude_none=True) == source


def test_a_key_pasted_as_the_gateways_source_is_refused_not_compared(tmp_path):
    """make check with an inventory compares the gateway's source with its classes' (key_problems): a
    source shown there is a name or a path, never a key pasted into one."""
    g = make_group_dir(tmp_path, {"pro6000": class_file(service='"host": "0.0.0.0", "api_key": {"env": "K"}')})
    (g / "gateway.py").write_text(f'gateway = {{"routes": ["pro6000"], "api_key": {{"file": "{KEY}"}}}}\n')
    with pytest.raises(SpecError) as e:
        check_inventory({"pro6000": ["a"], "gateway": ["gw"]}, {"a": {}, "gw": {}}, g)
    assert any(p.startswith(f"{g}/gateway.py: gateway.api_key = '***': file is not") for p in e.value.problems)
    assert not any(KEY in p for p in e.value.problems), e.value.problems


# --- 2. a token in an index URL -----------------------------------------------------------------

@pytest.mark.parametrize("url, rule", [
    ("https://pkgs.example/simple/?token=SeCrEt123", "without a query (?...) or fragment"),
    ("https://pkgs.example/simple/#SeCrEt123", "without a query (?...) or fragment"),
    ("https://pkgs.example/simple?", "without a query (?...) or fragment"),
    ("https://user:SeCrEt123@pkgs.example/simple/", "without credentials (user:password@)"),
])
@pytest.mark.parametrize("field, place", [
    ("engine.index_url", lambda u: data(engine={"sglang": "sglang==0.5.23", "index_url": u})),
    ("engine.extra_index_urls.0", lambda u: data(engine={"sglang": "sglang==0.5.23", "extra_index_urls": [u]})),
    ("hub.endpoint", lambda u: data(hub={"endpoint": u})),
])
def test_an_index_url_carrying_a_token_is_refused_showing_its_host_only(url, rule, field, place):
    p = one_problem(place(url))
    assert p.startswith(f"{SRC}: {field} = 'https://") and "pkgs.example" in p and rule in p, p
    assert "SeCrEt123" not in p and ("hub.token" if field == "hub.endpoint" else "netrc") in p


# --- 3. the depth check of JSON a host sent, on 4 MiB of hostile text ----------------------------

HALF = BLOCK_LIMIT // 2


@pytest.mark.parametrize("text", ['"' + "a" * (BLOCK_LIMIT - 1), '"' + '\\"' * HALF, '"' + "\\" * (BLOCK_LIMIT - 1),
                                  '["' + '\\"[' * (BLOCK_LIMIT // 3)], ids=["plain", "escaped quotes", "backslashes",
                                                                         "brackets"])
def test_an_unterminated_string_of_4_mib_is_refused_as_not_json(text):
    with pytest.raises(Unreadable, match=r"^config.json: not valid JSON \(Unterminated string"):
        load_json(text, "config.json")


def test_an_array_nested_4_mib_deep_is_refused_by_its_depth():
    with pytest.raises(Unreadable, match=rf"^config.json: JSON nested {HALF} levels deep \(at most {JSON_DEPTH}\)$"):
        load_json("[" * HALF + "]" * HALF, "config.json")


@pytest.mark.parametrize("value, deep", [
    (["[[[[", "\\", '\\"[{', {"k[": "\\\\"}], 2),  # brackets, quotes and backslashes inside strings count not
    ([[[[]]], {"a": [{}]}], 4),
    ("x" * (BLOCK_LIMIT - 16), 0),
])
def test_brackets_in_strings_do_not_count(value, deep):
    assert load_json(json.dumps(value), "x") == value
    nested = json.dumps(value)
    for _ in range(JSON_DEPTH - deep):
        nested = f"[{nested}]"
    assert load_json(nested, "x") is not None
    with pytest.raises(Unreadable, match=rf"nested {JSON_DEPTH + 1} levels deep"):
        load_json(f"[{nested}]", "x")


# --- 4. a host's tune.json -------------------------------------------------------------------------

STAMP, NOW, BY = "20261130T120000Z", 1_796_040_000, "alice@laptop"


@pytest.mark.parametrize("since, reason", [
    ("1e20", "since: expected whole seconds since 1970, 0..1099511627775; found '1e+20'"),
    ("100000000000000000000", "since: expected whole seconds since 1970, 0..1099511627775; found '1000000"),
    ("-1", "since: expected whole seconds"), ("true", "since: expected whole seconds"),
    ("1796040000.5", "since: expected whole seconds"),
    ("Infinity", "Infinity is not a finite number"), ("NaN", "NaN is not a finite number"),
    ("1e400", "1e400 is not a finite number"),
    ("[" * 2000 + "]" * 2000, "JSON nested 2001 levels deep (at most 64)"),
])
def test_a_tune_mark_out_of_bounds_is_an_unreadable_mark_naming_the_file_and_field(since, reason):
    text = f'{{"since": {since}, "by": "{BY}", "candidate": "block size 8"}}'
    mark = tune.read_mark(text)
    assert (mark.since, mark.by) == (0, "?") and mark.candidate.startswith(f"unreadable tune.json: {reason}"), mark
    # the host is returned from make tune as for any unreadable mark, not refused by an overflow in the plan
    facts = converged(SPEC)
    facts = replace(facts, deployed=replace(facts.deployed, tune=text))
    p = plan(SPEC, declared_files(SPEC, "pro6000", facts, secrets_of(SPEC)), facts, None, STAMP, NOW, BY)
    assert p.restart and f"(unreadable tune.json: {reason}" in p.why[0], p.why


# --- 5. a class's sections in a group file that is no class's ----------------------------------------

def test_a_class_section_in_a_group_file_of_no_class_is_refused_naming_that_file(tmp_path):
    g = make_group_dir(tmp_path, {"pro6000": class_file(),
                                  "boxes": 'ssh_user = "ubuntu"\nreadiness = {"load_timeout_s": 1}\nservice = {}\n'})
    (g / "gateway.py").write_text('gateway = {"routes": ["pro6000"]}\nsmoke = {"max_tokens": 0}\n')
    with pytest.raises(SpecError) as e:
        load_class_specs(g)
    rule = ("sections of a class belong in its class file (or in all.py, for every class); this file declares no "
            "gpu_class")
    assert e.value.problems == [f"{g}/boxes.py: readiness: {rule}", f"{g}/boxes.py: service: {rule}",
                                f"{g}/gateway.py: smoke: {rule}"]


def test_a_bad_default_in_all_py_is_blamed_on_all_py_once(tmp_path):
    g = make_group_dir(tmp_path, {"pro6000": class_file(), "a6000": class_file(),
                                  "h200": class_file(extra='smoke = {"max_tokens": 0}\n')})
    (g / "all.py").write_text((ROOT / "group_data" / "all.py").read_text() + 'smoke = {"max_tokens": 0}\n')
    with pytest.raises(SpecError) as e:
        load_class_specs(g)
    assert [p.split(" = ")[0] for p in e.value.problems] == [f"{g}/all.py: smoke.max_tokens",
                                                             f"{g}/h200.py: smoke.max_tokens"]


def test_the_shipped_group_data_sets_class_sections_in_class_files_and_all_py_only():
    assert set(load_class_specs(ROOT / "group_data")) == {"a6000", "cpu_real", "h200", "pro6000"}


# --- 6. a unit name the deploy's file names outgrow ----------------------------------------------------

def test_a_unit_name_leaves_room_for_its_longest_staged_file_name():
    longest = max(len(n.encode()) for n in layout.staged_names("x" * SERVICE_UNIT_MAX))
    assert SERVICE_UNIT_MAX == 227 and longest == 255
    s = ClassSpec.model_validate(data(service=svc(unit="x" * SERVICE_UNIT_MAX), hub={"token": {"env": "HF_TOKEN"}}))
    files = [s.unit_file, s.env_file, s.secret_file, s.config_file, s.auth_header_file,
             layout.hub_token_file(s.service.unit)]
    assert max(len(layout.staged_path(f).rsplit("/", 1)[1].encode()) for f in files) == 255


@pytest.mark.parametrize("unit", ["x" * (SERVICE_UNIT_MAX + 1), "x" * 230, "x" * 247])
def test_a_unit_name_whose_staged_files_would_not_fit_is_refused_saying_the_maximum(unit):
    p = one_problem(data(service=svc(unit=unit)))
    assert p.startswith(f"{SRC}: service.unit = 'xxx") and p.endswith(
        f"a systemd unit name of at most 227 characters: the deploy names files after it, the longest "
        f".U.hub-token.sglang-fleet-new, each within 255 bytes; found {len(unit)}"), p
    with pytest.raises(SpecError, match=r"gateway.unit = .*at most 227 characters"):
        validate_gateway("group_data/gateway.py", {"routes": ["pro6000"], "unit": unit})


# --- 7. numbers and flags as written ---------------------------------------------------------------------

@pytest.mark.parametrize("field, place, value, expected", [
    ("service.port", lambda v: data(service=svc(port=v)), "30000", "a whole number written as one"),
    ("service.port", lambda v: data(service=svc(port=v)), True, "a whole number written as one"),
    ("service.port", lambda v: data(service=svc(port=v)), 30000.0, "a whole number written as one"),
    ("service.tp_size", lambda v: data(service=svc(tp_size=v)), True, "a whole number written as one"),
    ("service.context_length", lambda v: data(service=svc(context_length=v)), "4096", "a whole number"),
    ("service.mem_fraction", lambda v: data(service=svc(mem_fraction=v)), "0.9", "a number written as one"),
    ("readiness.load_timeout_s", lambda v: data(readiness={"load_timeout_s": v}), True, "a number written as one"),
    ("gpu_class.mig", lambda v: data(gpu_class={**data()["gpu_class"], "mig": v}), 1, "True or False"),
    ("service.trust_remote_code", lambda v: data(service=svc(trust_remote_code=v)), "yes", "True or False"),
    ("speculative.num_steps", lambda v: data(speculative={"algorithm": "EAGLE", "num_steps": v, "topk": 1}), "3",
     "a whole number"),
])
def test_a_number_or_flag_of_another_type_is_refused(field, place, value, expected):
    p = one_problem(place(value))
    assert p.startswith(f"{SRC}: {field} = {value!r}: expected {expected}") and p.endswith(
        f"found {type(value).__name__}"), p


def test_a_whole_number_is_a_number():
    assert ClassSpec.model_validate(data(readiness={"load_timeout_s": 600})).readiness.load_timeout_s == 600
    with pytest.raises(SpecError, match=r"gateway.port = '8000': expected a whole number"):
        validate_gateway("group_data/gateway.py", {"routes": ["pro6000"], "port": "8000"})


def _lax(annotation: typing.Any, strict: bool = False) -> list:
    """The int, float and bool types in `annotation` that pydantic would coerce into (lax mode)."""
    if typing.get_origin(annotation) is typing.Annotated:
        strict = strict or any(_strict(m) for m in annotation.__metadata__)
        return _lax(typing.get_args(annotation)[0], strict)
    if annotation in (int, float, bool):
        return [] if strict else [annotation]
    if typing.get_origin(annotation) is typing.Literal:
        return []
    return [t for a in typing.get_args(annotation) for t in _lax(a)]


def _strict(m: typing.Any) -> bool:
    return isinstance(m, StrictFlag) or (isinstance(m, FieldInfo) and any(_strict(x) for x in m.metadata))


def _models(model: type[BaseModel]) -> typing.Iterator[type[BaseModel]]:
    yield model
    for sub in model.__subclasses__():
        yield from _models(sub)


def test_every_number_and_flag_of_the_spec_and_the_gateway_is_strict():
    assert gateway.Gateway in set(_models(spec.Strict))
    lax = [f"{m.__name__}.{name}" for m in _models(spec.Strict) for name, f in m.model_fields.items()
           if _lax(f.annotation, any(_strict(x) for x in f.metadata))]
    assert lax == []
