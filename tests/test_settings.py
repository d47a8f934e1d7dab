"""Settings are validated once, at start-up, with messages that state the rule."""

from __future__ import annotations

import pytest

from app.errors import ConfigError
from app.settings import load_settings


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"IDMINT_CLUSTER_ID": "16"}, "cluster_id must be in 0..15"),
        ({"IDMINT_EIGHT_BYTE_GENERATOR_ID": "2048"}, "eight_byte_generator_id must be in 0..2047"),
        ({"IDMINT_SIQ_SHARD": "256"}, "siq_shard must be in 0..255"),
        ({"IDMINT_MUID_MEDALLION": "1"}, "muid_medallion must be in"),
        ({"IDMINT_ETCD_ENDPOINTS": "127.0.0.1:2379"}, "http:// or https:// URLs"),
        ({"IDMINT_EIGHT_BYTE_POOL": "5-2"}, "eight_byte_pool must be LOW-HIGH"),
        ({"IDMINT_ETCD_ENDPOINTS": "http://a:1", "IDMINT_ETCD_LEASE_TTL": "2"}, "lease_safety_margin must be less"),
        ({"IDMINT_POSTGRES_URL": "postgresql://h/db", "IDMINT_LEASE_TTL": "2"}, "lease_safety_margin must be less"),
        ({"IDMINT_EIGHT_BYTE_GENERATOR_ID": "1", "IDMINT_EIGHT_BYTE_GENERATORS": "2"}, "must be 1 when"),
        ({"IDMINT_POSTGRES_SCHEMA": "Idmint; drop"}, "postgres_schema"),
        ({"IDMINT_HISTORY_CHECK_INTERVAL": "0"}, "history_check_interval must be more than 0 and at most 3600"),
        ({"IDMINT_HISTORY_CHECK_INTERVAL": "3601"}, "history_check_interval must be more than 0 and at most 3600"),
    ],
)
def test_bad_settings_state_the_rule(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], fragment: str) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ConfigError, match=fragment):
        load_settings()


def test_endpoints_are_a_comma_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IDMINT_ETCD_ENDPOINTS", "http://a:2379, https://b:2379")
    assert load_settings().etcd_endpoints == ["http://a:2379", "https://b:2379"]


@pytest.mark.parametrize(
    "url",
    ["http://root:secret@127.0.0.1:2379", "https://root:secret@etcd.example:2379/", "http://secret@127.0.0.1:2379"],
)
def test_a_password_in_an_endpoint_url_is_refused_and_never_shown(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.setenv("IDMINT_ETCD_ENDPOINTS", f"http://127.0.0.1:2379,{url}")
    with pytest.raises(ConfigError, match="IDMINT_ETCD_USER and IDMINT_ETCD_PASSWORD") as info:
        load_settings()
    assert "secret" not in str(info.value) and "***@" in str(info.value)


def test_lease_settings_apply_to_every_networked_backend_and_keep_their_etcd_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("IDMINT_ETCD_LEASE_TTL", "12")
    monkeypatch.setenv("IDMINT_ETCD_SAFETY_MARGIN", "3")
    settings = load_settings()
    assert (settings.lease_ttl, settings.lease_safety_margin) == (12, 3.0)
    monkeypatch.setenv("IDMINT_LEASE_TTL", "20")
    assert load_settings().lease_ttl == 20  # the new name wins over its alias


def test_etcd_and_postgres_together_stop_start_up_naming_both(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IDMINT_ETCD_ENDPOINTS", "http://127.0.0.1:2379")
    monkeypatch.setenv("IDMINT_POSTGRES_URL", "postgresql://idmint:hunter2@127.0.0.1/idmint")
    with pytest.raises(ConfigError, match="IDMINT_ETCD_ENDPOINTS and IDMINT_POSTGRES_URL are both set") as info:
        load_settings()
    assert "hunter2" not in str(info.value)


def test_mysql_and_another_backend_together_stop_start_up_naming_both(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IDMINT_POSTGRES_URL", "postgresql://idmint:hunter2@127.0.0.1/idmint")
    monkeypatch.setenv("IDMINT_MYSQL_URL", "mysql://idmint:hunter3@127.0.0.1:3306/idmint")
    with pytest.raises(ConfigError, match="IDMINT_POSTGRES_URL and IDMINT_MYSQL_URL are both set") as info:
        load_settings()
    assert "hunter2" not in str(info.value) and "hunter3" not in str(info.value)


def test_the_postgres_url_is_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IDMINT_POSTGRES_URL", "host=db password=hunter2 dbname=idmint")
    settings = load_settings()
    assert "hunter2" not in repr(settings) and "hunter2" not in str(settings.postgres_url)
    assert settings.postgres_url is not None and "hunter2" in settings.postgres_url.get_secret_value()
