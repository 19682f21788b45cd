from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from spark_jobs.settings import (
    PORT_NAMES,
    REPO_ROOT,
    SECRET_NAMES,
    Settings,
    SettingsError,
    defaults,
    env_example,
    env_name,
    load_settings,
)
from spark_jobs.stack.secrets import ensure_env_file


def test_defaults_without_environment_or_env_file(tmp_path: Path) -> None:
    s = load_settings({"LAKE_STATE_DIR": str(tmp_path)})
    assert (s.host, s.pg_port, s.pg_host, s.spark_master, s.stream_queries) == ("127.0.0.1", 15432, "127.0.0.1",
                                                                               "local[2]", "cdc,events")
    # Root shares its artifact cache with the service user (spark_jobs.stack.service_user); root's home is private.
    assert s.cache_dir == (Path("/var/cache/lakestream") if os.geteuid() == 0 else Path.home() / ".cache" / "lakestream")
    assert s.pg_password == "" and s.spark_connect_url == "sc://127.0.0.1:15002/"
    assert defaults()["kafka_bootstrap"] == "{host}:{kafka_port}"


def test_defaults_derive_endpoints_from_ports(tmp_path: Path) -> None:
    s = load_settings({"LAKE_STATE_DIR": str(tmp_path), "LAKE_KAFKA_PORT": "29092", "LAKE_MINIO_PORT": "29000"})
    assert s.kafka_bootstrap == "127.0.0.1:29092"
    assert s.s3_endpoint == "http://127.0.0.1:29000"
    assert s.metastore_uri == ""  # no metastore service: PostgreSQL itself (spark_jobs.session.catalog_conf)
    assert s.warehouse_uri == "s3a://lake/warehouse"
    assert s.state_dir == tmp_path.resolve()


def test_explicit_endpoint_wins_over_port(tmp_path: Path) -> None:
    s = load_settings({"LAKE_STATE_DIR": str(tmp_path), "LAKE_KAFKA_BOOTSTRAP": "k1:9092,k2:9092",
                       "LAKE_SPARK_MASTER": "spark://m:7077"})
    assert s.kafka_bootstrap == "k1:9092,k2:9092"
    assert s.spark_master == "spark://m:7077"


def test_env_file_in_state_dir_is_read_and_env_wins(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("# c\nLAKE_PG_PASSWORD='from-file'\nLAKE_S3_BUCKET=filebucket\nLAKE_HOST=10.0.0.9\n")
    s = load_settings({"LAKE_STATE_DIR": str(tmp_path), "LAKE_S3_BUCKET": "envbucket"})
    assert s.pg_password == "from-file"
    assert s.s3_bucket == "envbucket"
    assert s.kafka_bootstrap == "10.0.0.9:19092"  # a derived default follows a value from .env


def test_state_dir_comes_from_the_environment_only(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(f"LAKE_STATE_DIR={tmp_path / 'elsewhere'}\n")
    assert load_settings({"LAKE_STATE_DIR": str(tmp_path)}).state_dir == tmp_path.resolve()


def test_explicit_mapping_ignores_the_process_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKE_S3_BUCKET", "from-process")
    assert load_settings({"LAKE_STATE_DIR": str(tmp_path)}).s3_bucket == "lake"
    monkeypatch.setenv("LAKE_STATE_DIR", str(tmp_path))
    assert load_settings().s3_bucket == "from-process"


def test_unknown_lake_name_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(SettingsError) as err:
        load_settings({"LAKE_STATE_DIR": str(tmp_path), "LAKE_KAFKA_BOOTSTRAPS": "x", "LAKE_PG_PASWORD": "y",
                       "OTHER_VAR": "ignored"})
    assert str(err.value) == ("unknown setting(s) LAKE_KAFKA_BOOTSTRAPS, LAKE_PG_PASWORD; "
                              "the valid names are listed in .env.example")


def test_every_bad_value_is_reported_at_once(tmp_path: Path) -> None:
    with pytest.raises(SettingsError) as err:
        load_settings({"LAKE_STATE_DIR": str(tmp_path), "LAKE_PG_PORT": "abc", "LAKE_DQ_DOCS_KEEP": "many"})
    assert str(err.value).splitlines() == [
        "LAKE_PG_PORT='abc' is not an integer; fix it in the environment or .env",
        "LAKE_DQ_DOCS_KEEP='many' is not an integer; fix it in the environment or .env",
    ]


def test_a_bad_value_in_the_env_file_is_named_too(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("LAKE_KAFKA_PORT=90000\n")
    with pytest.raises(SettingsError, match=r"LAKE_KAFKA_PORT=90000 is not a TCP port \(1-65535\)"):
        load_settings({"LAKE_STATE_DIR": str(tmp_path)})


@pytest.mark.parametrize(
    ("var", "value", "message"),
    [
        ("LAKE_PG_PORT", "abc", "LAKE_PG_PORT='abc' is not an integer"),
        ("LAKE_KAFKA_PORT", "70000", "LAKE_KAFKA_PORT=70000 is not a TCP port"),
        ("LAKE_SPARK_MASTER", "localhost", "is not a Spark master URL"),
        ("LAKE_S3_ENDPOINT", "minio:9000", "must start with http:// or https://"),
        ("LAKE_KAFKA_BOOTSTRAPS", "x", "unknown setting(s) LAKE_KAFKA_BOOTSTRAPS"),
        ("LAKE_STREAM_MAX_RECORDS_PER_TASK", "0", "LAKE_STREAM_MAX_RECORDS_PER_TASK=0 must be >= 1"),
        ("LAKE_CDC_TASK_MERGE_MAX_MB", "-1", "LAKE_CDC_TASK_MERGE_MAX_MB=-1 must be >= 0"),
        ("LAKE_STREAM_JAVA_OPTIONS", "-Xss4m UseG1GC", "'UseG1GC' is not a JVM option"),
    ],
)
def test_bad_settings_name_the_problem(tmp_path: Path, var: str, value: str, message: str) -> None:
    with pytest.raises(SettingsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_settings({"LAKE_STATE_DIR": str(tmp_path), var: value})


def test_malformed_env_file_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("LAKE_PG_PORT=1\nnot a pair\n")
    with pytest.raises(SettingsError, match=r"\.env:2: expected KEY=VALUE"):
        load_settings({"LAKE_STATE_DIR": str(tmp_path)})


def test_a_misspelt_setting_in_the_env_file_is_refused_naming_the_file(tmp_path: Path) -> None:
    """As in the environment: a LAKE_ key the model does not know is a typo, not something to ignore; other keys
    (another tool's) are left alone."""
    (tmp_path / ".env").write_text("OTHER_TOOL=1\nLAKE_PG_PORT=1\nLAKE_EVENTS_TRIGER_SECONDS=2\n")
    with pytest.raises(SettingsError, match=r"/\.env: unknown setting\(s\) LAKE_EVENTS_TRIGER_SECONDS; the valid "
                                            r"names are listed in \.env\.example"):
        load_settings({"LAKE_STATE_DIR": str(tmp_path)})
    (tmp_path / ".env").write_text("OTHER_TOOL=1\nLAKE_PG_PORT=1\n")
    assert load_settings({"LAKE_STATE_DIR": str(tmp_path)}).pg_port == 1


def test_settings_are_frozen(tmp_path: Path) -> None:
    s = load_settings({"LAKE_STATE_DIR": str(tmp_path)})
    with pytest.raises(ValueError, match="frozen"):
        s.pg_port = 1
    with pytest.raises(ValueError, match="frozen"):
        s.pg_password = "x"
    assert s.model_copy(update={"state_dir": tmp_path / "b"}).state_dir == tmp_path / "b"


def test_secrets_never_show_in_repr_or_str(tmp_path: Path) -> None:
    values = {env_name(name): f"secret-of-{name}" for name in SECRET_NAMES}
    s = load_settings({"LAKE_STATE_DIR": str(tmp_path), **values})
    for name in SECRET_NAMES:
        assert getattr(s, name) == f"secret-of-{name}"  # the plain value, for the code that hands it on
    for text in (repr(s), str(s), repr(s.model_dump()), "\n".join(s.redacted().values())):
        assert "secret-of-" not in text
    assert "pg_password_secret=SecretStr('**********')" in repr(s)


def test_redacted_masks_every_secret(tmp_path: Path) -> None:
    ensure_env_file(tmp_path)
    s = load_settings({"LAKE_STATE_DIR": str(tmp_path)})
    red = s.redacted()
    for name in SECRET_NAMES:
        assert getattr(s, name), name
        assert red[name] == "***"
        assert getattr(s, name) not in "\n".join(red.values())


def test_generated_secrets_are_private_unique_and_stable(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    ensure_env_file(a)
    ensure_env_file(b)
    assert stat.S_IMODE(os.stat(a / ".env").st_mode) == 0o600
    sa = load_settings({"LAKE_STATE_DIR": str(a)})
    sb = load_settings({"LAKE_STATE_DIR": str(b)})
    assert sa.pg_password != sb.pg_password
    assert len(sa.pg_password) >= 24
    before = (a / ".env").read_text()
    ensure_env_file(a)
    assert (a / ".env").read_text() == before
    assert "minioadmin" not in before


def test_env_example_is_rendered_from_the_model() -> None:
    assert (REPO_ROOT / ".env.example").read_text() == env_example.render(), (
        "regenerate it: python -m spark_jobs.settings.env_example")
    assert env_example.main(["--check"]) == 0


def test_each_secret_reads_its_lake_name() -> None:
    aliases = {f.validation_alias for f in Settings.model_fields.values() if f.validation_alias}
    assert aliases == {env_name(name) for name in SECRET_NAMES}
    assert len(SECRET_NAMES) == 21


def test_every_port_setting_is_checked_for_clashes() -> None:
    assert {name for name in defaults() if name.endswith("_port")} == set(PORT_NAMES)


def test_env_example_lists_every_setting() -> None:
    text = (REPO_ROOT / ".env.example").read_text()
    listed = {line.split("=", 1)[0] for line in text.splitlines() if line and not line.startswith("#")}
    assert listed == {env_name(n) for n in defaults()}
    for name in SECRET_NAMES:
        assert f"{env_name(name)}=\n" in text, f"{name} must have no value in .env.example"


def test_the_stream_driver_takes_its_java_options_from_the_settings(tmp_path: Path) -> None:
    from spark_jobs.streaming.engine import stream_conf

    default = stream_conf(load_settings({"LAKE_STATE_DIR": str(tmp_path)}))["spark.driver.extraJavaOptions"].split()
    assert default[0] == "-XX:+ExitOnOutOfMemoryError"  # always: a JVM out of heap exits and is restarted
    assert "-XX:Tier4InvocationThreshold=50000" in default
    mine = stream_conf(load_settings({"LAKE_STATE_DIR": str(tmp_path), "LAKE_STREAM_JAVA_OPTIONS": " -Xss4m  -XX:+UseG1GC"}))
    assert mine["spark.driver.extraJavaOptions"] == "-XX:+ExitOnOutOfMemoryError -Xss4m -XX:+UseG1GC"
    empty = stream_conf(load_settings({"LAKE_STATE_DIR": str(tmp_path), "LAKE_STREAM_JAVA_OPTIONS": ""}))
    assert empty["spark.driver.extraJavaOptions"] == "-XX:+ExitOnOutOfMemoryError"
