"""No secret in any message, argv or world-readable file (issue 38, item 4): a password or key pasted where a
variable's name goes is refused at make check without being shown, wherever a secret source is declared; a URL
with a token in its path (a Slack, Discord or Teams webhook, an index or hub endpoint) is refused showing its host
only; a webhook URL declared as a secret source is read by the deploy, written only into the 0600 bundle, and
never shown. Generated secrets (hypothesis) are checked against every message."""

from __future__ import annotations

import re
import string
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from fleet.spec.load import MonitoringFile, SpecError, explain, validate_class, validate_gateway
from fleet.monitoring.config import alertmanager_config, webhook_urls
from fleet.monitoring.models import ALERTMANAGER_CONFIG, Monitoring
from fleet.spec.secrets import SecretError, resolve
from fleet.spec import ClassSpec, SecretSource
from fleet.spec.names import path_secret
from test_spec import SRC, data, svc
from fakehost import fresh_run  # noqa: F401 (a fixture: the run converging reports into)
from test_tasks_monitoring import NOTHING, Ops, converging, group_dir, password  # noqa: F401 (fixtures)

ROOT = Path(__file__).resolve().parents[2]
PROFILE = settings(derandomize=True, deadline=None, database=None, max_examples=200)
NOT_SHOWN = "the value given looks like a secret itself, not the name of an environment variable: not shown"


def _monitoring(source, where):
    receivers = [{"name": "a", "webhook_url": source}] if where == "receivers" else []
    return {"monitoring": {"receivers": receivers, **({"password": source} if where == "password" else {})}}


def _refusals(validate) -> list[str]:
    try:
        validate()
    except SpecError as e:
        return e.problems
    except ValidationError as e:
        return explain(SRC, e, MonitoringFile)
    return []


GATEWAY_FLOATING = {"address": "10.0.0.100", "router_id": 7}
# Every place a secret source is declared, by its field: the problems make check gives for a source there
PLACES = {
    "service.api_key": lambda s: _refusals(lambda: validate_class(SRC, data(service=svc(api_key=s)))),
    "service.secret_environment.HF_TOKEN": lambda s: _refusals(
        lambda: validate_class(SRC, data(service=svc(secret_environment={"HF_TOKEN": s})))),
    "hub.token": lambda s: _refusals(lambda: validate_class(SRC, data(hub={"token": s}))),
    "gateway.api_key": lambda s: _refusals(lambda: validate_gateway(SRC, {"routes": ["pro6000"], "api_key": s})),
    "gateway.floating.password": lambda s: _refusals(lambda: validate_gateway(
        SRC, {"routes": ["pro6000"], "floating": {**GATEWAY_FLOATING, "password": s}})),
    "monitoring.password": lambda s: _refusals(lambda: MonitoringFile.model_validate(_monitoring(s, "password"))),
    "monitoring.receivers.0.webhook_url": lambda s: _refusals(
        lambda: MonitoringFile.model_validate(_monitoring(s, "receivers"))),
}


# --- a secret pasted as a variable's name ------------------------------------------------------------------------

PASTED = ["hunter2", "dragon", "letmein", "s3cr3t_pa55", "0123456789abcdef0123456789abcdef"[1:] + "a",
          "a3f9b2c4d5e6f708192a3b4c5d6e7f80",  # a lowercase hex API key
          "A3F9B2C4D5E6F708192A3B4C5D6E7F80A3F9B2C4",  # the same in upper case: one long word with digits
          "AKIAIOSFODNN7EXAMPLE", "JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP", "QWERTYUIOPASDFGHJKLZXCVBNMQWERTY",
          "sk_live_4eC39HqLyjWDarjtT1zdp7dc", "ghp_" + "a1" * 18]


@pytest.mark.parametrize("name", PASTED)
@pytest.mark.parametrize("where", PLACES)
def test_a_secret_pasted_as_a_variables_name_is_refused_at_check_unshown(where, name):
    problems = PLACES[where]({"env": name})
    assert problems and all(name not in p for p in problems), problems
    assert any(p.startswith(f"{SRC}: {where}") and (NOT_SHOWN in p or "env is not an environment variable name" in p)
               for p in problems), problems


def _project_variables() -> set[str]:
    """Every variable name a secret source of the project's own group_data, docs, lab and tests names."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "*.py", "*.md", "*.toml"], capture_output=True,
                            text=True, check=True).stdout.split()
    found = set()
    for path in listed:
        text = (ROOT / path).read_text(errors="replace")
        found |= set(re.findall(r"""["']env["']: *["']([A-Za-z_][A-Za-z0-9_]*)["']""", text))
        found |= set(re.findall(r"""SecretSource\(env=["']([A-Za-z_][A-Za-z0-9_]*)["']""", text))
    return found - set(PASTED)


PROJECT_VARIABLES = sorted(_project_variables())


def test_every_variable_name_the_project_uses_is_accepted():
    assert {"HF_TOKEN", "SGLANG_FLEET_MONITORING_PASSWORD", "https_proxy_key", "_K2"} <= set(PROJECT_VARIABLES)
    refused = [n for n in PROJECT_VARIABLES if PLACES["service.api_key"]({"env": n})]
    assert refused == []
    for name in ("SGLANG_API_KEY_PRO6000", "LAB_A6000_API_KEY_NOT_SET", "http_proxy", "K", "HF_TOKEN_PATH"):
        assert SecretSource(env=name).env == name


ALNUM = string.ascii_letters + string.digits
# Secrets as they are pasted: tokens of letters and digits with a digit, hex keys, base64, passwords
tokens = st.one_of(
    st.text(st.sampled_from(string.ascii_lowercase + string.digits), min_size=6, max_size=64)
    .filter(lambda s: any(c.isdigit() for c in s)),
    st.text(st.sampled_from("0123456789abcdef"), min_size=32, max_size=64),
    st.text(st.sampled_from("0123456789ABCDEF"), min_size=32, max_size=64).filter(lambda s: re.search("[0-9]", s)),
    st.text(st.sampled_from(ALNUM + "+/"), min_size=32, max_size=88).map(lambda s: s + "=="),
    st.text(st.sampled_from(ALNUM), min_size=16, max_size=64).filter(lambda s: re.search("[0-9]", s)),
)


@PROFILE
@given(secret=tokens)
def test_a_generated_secret_as_a_variables_name_is_refused_and_never_shown(secret):
    for where, place in PLACES.items():
        problems = place({"env": secret})
        assert problems, (where, secret)
        assert all(secret not in p for p in problems), problems


# --- a token in a URL's path ---------------------------------------------------------------------------------------

SLACK = "https://hooks.slack.com/services/T0123ABCD/B0123ABCD/aBcDeFgHiJkLmNoPqRsTuVwX"
DISCORD = "https://discord.com/api/webhooks/1234567890123456/AbCdEf_GhIjKl-MnOp"
TEAMS = "https://contoso.webhook.office.com/webhookb2/0c1d/IncomingWebhook/0123456789abcdef0123456789abcdef/ab"
CLOUDSMITH = "https://dl.cloudsmith.io/Ab12Cd34Ef56Gh78/acme/wheels/python/simple/"
URL_PLACES = {
    "engine.index_url": lambda u: _refusals(
        lambda: validate_class(SRC, data(engine={"sglang": "sglang==0.5.23", "index_url": u}))),
    "engine.extra_index_urls.0": lambda u: _refusals(
        lambda: validate_class(SRC, data(engine={"sglang": "sglang==0.5.23", "extra_index_urls": [u]}))),
    "hub.endpoint": lambda u: _refusals(lambda: validate_class(SRC, data(hub={"endpoint": u}))),
    "monitoring.receivers.0.webhook_url": PLACES["monitoring.receivers.0.webhook_url"],
}


@pytest.mark.parametrize("url, secret", [(SLACK, "aBcDeFgHiJkLmNoPqRsTuVwX"), (DISCORD, "AbCdEf_GhIjKl-MnOp"),
                                         (TEAMS, "0123456789abcdef0123456789abcdef"),
                                         (CLOUDSMITH, "Ab12Cd34Ef56Gh78")])
@pytest.mark.parametrize("where", URL_PLACES)
def test_a_url_with_a_token_in_its_path_is_refused_showing_its_host_only(where, url, secret):
    problems = URL_PLACES[where](url)
    assert len(problems) == 1 and problems[0].startswith(f"{SRC}: {where} = 'https://"), problems
    assert "without a token in its path" in problems[0] and secret not in problems[0] and "/***'" in problems[0]
    if where.startswith("monitoring"):  # where it goes instead
        assert "declare a URL that holds a secret as a secret source" in problems[0]


@pytest.mark.parametrize("pasted", [SLACK.removeprefix("https://"), "aBcDeFgHiJkLmNoPqRsTuVwX", "://Zq000000/://",
                                    "ftp://h/Zq000000",
                                    "hooks.slack.com/services/T0123ABCD/B0123ABCD/aBcDeFgHiJkLmNoPqRsTuVwX x"])
@pytest.mark.parametrize("where", URL_PLACES)
def test_a_url_fields_value_that_is_no_url_is_refused_unshown(where, pasted):
    problems = URL_PLACES[where](pasted)
    assert len(problems) == 1 and problems[0].startswith(f"{SRC}: {where} = '***': an http(s) URL"), problems


@pytest.mark.parametrize("url", ["https://[::1/x", "http://[zz]/services", "https://h.example:99999/x"])
@pytest.mark.parametrize("where", URL_PLACES)
def test_a_url_python_cannot_split_is_refused_as_no_url(where, url):
    problems = URL_PLACES[where](url)
    assert len(problems) == 1 and "an http(s) URL" in problems[0], problems


@pytest.mark.parametrize("url", ["https://pypi.org/simple", "https://download.pytorch.org/whl/cu128",
                                 "https://artifactory.corp.example/api/pypi/pypi-remote-2024/simple/",
                                 "http://10.0.0.5:8080/root/pypi/+simple/", "https://hf-mirror.com",
                                 "http://10.0.0.5:9099/alerts", "https://alerts.fleet.example/sglang",
                                 "https://flashinfer.ai/whl/cu128/torch2.9/flashinfer-python/"])
@pytest.mark.parametrize("where", URL_PLACES)
def test_a_url_of_the_usual_shape_passes(where, url):
    assert URL_PLACES[where](url) == []


@PROFILE
@given(secret=tokens.filter(lambda s: len(s) >= 16 and "/" not in s and "+" not in s and "=" not in s),
       prefix=st.sampled_from(["/simple/", "/", "/api/webhooks/1/", "/services/x/"]))
def test_a_generated_token_in_a_urls_path_is_refused_and_never_shown(secret, prefix):
    url = f"https://pkgs.example{prefix}{secret}/simple"
    assert path_secret(url)
    for where, place in URL_PLACES.items():
        problems = place(url)
        assert problems and all(secret not in p for p in problems), (where, problems)


# --- a webhook URL declared as a secret source -------------------------------------------------------------------

SECRET_MON = Monitoring(receivers=[{"name": "chat", "webhook_url": {"env": "SLACK_WEBHOOK_URL"}},
                                   {"name": "oncall", "webhook_url": "http://10.0.0.5:9099/alerts"}])


def test_a_webhook_url_from_a_secret_source_goes_into_alertmanagers_configuration_only():
    urls = webhook_urls(SECRET_MON, SRC, {"SLACK_WEBHOOK_URL": SLACK})
    assert urls == {"chat": SLACK}
    config = alertmanager_config(SECRET_MON, urls)
    assert [c["webhook_configs"][0]["url"] for c in config["receivers"][1:]] == [SLACK, "http://10.0.0.5:9099/alerts"]
    # what group_data shows (debug-inventory, make check's messages) is the source, never the value
    assert SLACK not in SECRET_MON.model_dump_json() and SLACK not in repr(SECRET_MON)


@pytest.mark.parametrize("environ, expected", [
    ({}, "environment variable SLACK_WEBHOOK_URL is not set where the deploy runs"),
    ({"SLACK_WEBHOOK_URL": "ftp://hooks.slack.com/services/SeCrEt0123456789"}, "not a usable webhook URL"),
    ({"SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/SeCrEt0123456789 x"}, "not a usable webhook URL"),
    ({"SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/SeCrEt0123456789\n"}, "not a usable webhook URL"),
    ({"SLACK_WEBHOOK_URL": "SeCrEt0123456789"}, "not a usable webhook URL"),
])
def test_an_unusable_webhook_source_is_refused_naming_the_field_not_the_value(environ, expected):
    with pytest.raises(SecretError) as e:
        webhook_urls(SECRET_MON, SRC, environ)
    assert e.value.problems == [p for p in e.value.problems if "SeCrEt" not in p]
    assert len(e.value.problems) == 1 and e.value.problems[0].startswith(f"{SRC}: monitoring.receivers.0.webhook_url: ")
    assert expected in e.value.problems[0]


def test_the_deploy_writes_a_secret_webhook_url_into_the_0600_bundle_and_shows_it_nowhere(group_dir, monkeypatch):
    (group_dir / "mon.py").write_text('monitoring = {"receivers": [{"name": "chat", "webhook_url": '
                                      '{"env": "SLACK_WEBHOOK_URL"}}]}\n')
    monkeypatch.setenv("SLACK_WEBHOOK_URL", SLACK)
    ops = Ops(monkeypatch)
    row, _, logged = converging(group_dir, NOTHING)
    assert row.verdict == "passed preflight", row.reasons
    bundled = next(kw for kind, kw in ops.queued if kind == "_bundle")  # uploaded as 0600 files (bundle_commands)
    assert SLACK in bundled["files"][ALERTMANAGER_CONFIG]
    shown = [*logged, *ops.names(), *row.reasons, row.action,
             *(str(kw.get("commands", "")) for kind, kw in ops.queued if kind != "_bundle")]
    assert not [s for s in shown if "aBcDeFgHiJkLmNoPqRsTuVwX" in s], shown

    monkeypatch.delenv("SLACK_WEBHOOK_URL")  # unreadable: the host is refused, naming the field and the source
    ops.queued.clear()
    row, _, _ = converging(group_dir, NOTHING)
    assert row.verdict == "REFUSED" and any("monitoring.receivers.0.webhook_url: environment variable "
                                            "SLACK_WEBHOOK_URL is not set" in r for r in row.reasons), row.reasons
    assert ops.names() == ["Refuse host (preflight failed)"]


# --- no refusal of a secret's read shows its value ----------------------------------------------------------------

@PROFILE
@given(value=tokens.map(lambda s: "Zq" + s))  # Zq: no word of a message holds it
def test_no_refusal_of_a_read_secret_shows_its_value(value):
    spec = ClassSpec.model_validate(data(service=svc(api_key={"env": "SOME_KEY"},
                                                     secret_environment={"HF_TOKEN": {"env": "HF_TOKEN"}})))
    with pytest.raises(SecretError) as e:  # a key that starts with -, a token that spans lines
        resolve(spec, SRC, {"SOME_KEY": "-" + value, "HF_TOKEN": f"{value}\n{value}"})
    assert len(e.value.problems) == 2 and not [p for p in e.value.problems if value in p], e.value.problems
    with pytest.raises(SecretError) as e:
        webhook_urls(SECRET_MON, SRC, {"SLACK_WEBHOOK_URL": f"https://hooks.slack.com/{value} x"})
    assert not [p for p in e.value.problems if value in p], e.value.problems


@PROFILE
@given(pasted=st.text(st.sampled_from("hs:/[]@?#%. -x19Zq"), max_size=40),
       secret=st.text(st.sampled_from(ALNUM), min_size=14, max_size=40).map(lambda s: "Zq" + s))
def test_any_text_in_a_url_field_is_judged_and_its_token_never_shown(pasted, secret):
    """Brackets, ports, percent signs and spaces around a token (of the length path_secret knows one by): refused
    or accepted, never a traceback; a refused value that is no http(s) URL is not shown at all."""
    for where, place in URL_PLACES.items():
        problems = place(f"{pasted}{secret}/{pasted}")
        assert not [p for p in problems if secret in p], (where, problems)


def test_make_status_compares_with_the_bundle_of_the_webhook_urls_it_can_read(monkeypatch):
    from ops import fleet as ops_fleet
    built = []
    monkeypatch.setattr(ops_fleet.hosts, "monitoring_bundle", lambda inventory, group_dir, mon, urls: (
        built.append(dict(urls)) or ({}, [])))
    monkeypatch.setattr(ops_fleet.status, "judge_monitoring", lambda *args: args[-1])
    fleet = SimpleNamespace(state=SimpleNamespace(inventory=None), fact=lambda *a, **kw: (None, "", ""))
    monkeypatch.setenv("SLACK_WEBHOOK_URL", SLACK)
    ops_fleet.monitoring_status(fleet, SimpleNamespace(name="mon"), "monitoring", SECRET_MON)
    monkeypatch.delenv("SLACK_WEBHOOK_URL")  # not here: a stand-in, so the bundle compared differs from any deployed
    ops_fleet.monitoring_status(fleet, SimpleNamespace(name="mon"), "monitoring", SECRET_MON)
    assert built == [{"chat": SLACK}, {"chat": "unread", "oncall": "unread"}]
