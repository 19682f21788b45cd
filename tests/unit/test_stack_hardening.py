"""The stack's configuration keeps listeners on LAKE_HOST, secrets off command lines and the state dir private."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from spark_jobs import jars, session
from spark_jobs.settings import SECRET_NAMES, Settings, SettingsError, load_settings
from spark_jobs.stack import bootstrap, configs, services, supervisor, templates
from spark_jobs.stack.configs import template_values
from spark_jobs.stack.templates import render_template

SECRETS = {"LAKE_S3_ACCESS_KEY": "lakeaccesskeyxyz", "LAKE_S3_SECRET_KEY": "s3secretvalue0123456789",
           "LAKE_PG_PASSWORD": "pgpasswordvalue123", "LAKE_CDC_PASSWORD": "cdcpasswordvalue123",
           "LAKE_MINIO_ROOT_USER": "rootuserxyz", "LAKE_MINIO_ROOT_PASSWORD": "minioRootPassword123",
           "LAKE_AIRFLOW_ADMIN_PASSWORD": "airflowAdminPw123", "LAKE_AIRFLOW_SECRET_KEY": "airflowSecretKey123",
           "LAKE_SPARK_CONNECT_TOKEN": "sparkConnectToken123",
           "LAKE_PG_AIRFLOW_PASSWORD": "pgAirflowPw123", "LAKE_PG_METASTORE_PASSWORD": "pgMetastorePw123",
           "LAKE_PG_APP_PASSWORD": "pgAppPw123", "LAKE_KAFKA_BROKER_PASSWORD": "kafkaBrokerPw123",
           "LAKE_KAFKA_TOOLS_PASSWORD": "kafkaToolsPw123", "LAKE_KAFKA_CONNECT_PASSWORD": "kafkaConnectPw123",
           "LAKE_KAFKA_STREAM_PASSWORD": "kafkaStreamPw123", "LAKE_KAFKA_PRODUCER_PASSWORD": "kafkaProducerPw123",
           "LAKE_CONNECT_REST_PASSWORD": "connectRestPw123", "LAKE_THRIFT_PASSWORD": "thriftPw123",
           "LAKE_DQ_DOCS_PASSWORD": "dqDocsPw123", "LAKE_SPARK_AUTH_SECRET": "sparkAuthSecret123"}


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return load_settings({"LAKE_STATE_DIR": str(tmp_path / "state"), "LAKE_HOST": "127.0.0.2", **SECRETS})


def test_every_secret_setting_has_a_test_value() -> None:
    assert {f"LAKE_{n.upper()}" for n in SECRET_NAMES} == set(SECRETS)


def test_two_services_on_one_port_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="LAKE_STREAM_DRIVER_PORT and LAKE_THRIFT_PORT are both 10000"):
        load_settings({"LAKE_STATE_DIR": str(tmp_path), "LAKE_STREAM_DRIVER_PORT": "10000"})


def test_the_builder_conf_has_no_secret_and_the_defaults_file_has_them_privately(settings: Settings) -> None:
    public = session.public_spark_conf(settings)
    assert not session.SECRET_SPARK_KEYS & set(public)
    for value in SECRETS.values():
        assert all(value not in v for v in public.values())
    conf_dir = session.write_spark_defaults(settings)
    defaults = conf_dir / "spark-defaults.conf"
    assert stat.S_IMODE(defaults.stat().st_mode) == 0o600
    text = defaults.read_text()
    assert "spark.hadoop.fs.s3a.secret.key s3secretvalue0123456789" in text
    assert "spark.hadoop.fs.s3a.access.key lakeaccesskeyxyz" in text
    assert "spark.python.unix.domain.socket.enabled true" in text


def test_the_defaults_file_is_tightened_and_refreshed(settings: Settings) -> None:
    defaults = session.write_spark_defaults(settings) / "spark-defaults.conf"
    defaults.write_text("stale\n")
    defaults.chmod(0o644)
    session.write_spark_defaults(settings)
    assert stat.S_IMODE(defaults.stat().st_mode) == 0o600
    assert "s3secretvalue0123456789" in defaults.read_text()


def test_build_session_refuses_a_secret_as_an_extra_option(settings: Settings) -> None:
    with pytest.raises(ValueError, match=r"secret Spark properties .*spark\.hadoop\.fs\.s3a\.secret\.key"):
        session.build_session(settings, "x", extra={"spark.hadoop.fs.s3a.secret.key": "k"})


class _Builder:
    """Records what ``build_session`` hands Spark's builder (no JVM)."""

    def __init__(self) -> None:
        self.conf: dict[str, str] = {}

    def appName(self, _name: str) -> _Builder:
        return self

    def config(self, key: str, value: str) -> _Builder:
        self.conf[key] = value
        return self

    def enableHiveSupport(self) -> _Builder:
        return self

    def getOrCreate(self) -> dict[str, str]:
        return self.conf


@pytest.mark.parametrize("short_lived", [True, False])
def test_only_a_short_lived_driver_gets_the_short_lived_jvm_options(settings: Settings, short_lived: bool,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark.sql import SparkSession

    builder = _Builder()
    monkeypatch.setattr(SparkSession, "builder", builder)
    for name in ("SPARK_CONF_DIR", "SPARK_LOCAL_IP", "PYSPARK_PYTHON"):  # build_session sets them: restored after
        monkeypatch.setenv(name, os.environ.get(name, ""))
    conf: Any = session.build_session(settings, "x", short_lived=short_lived)
    assert (conf.get("spark.driver.extraJavaOptions") == session.SHORT_LIVED_JVM_OPTIONS) is short_lived
    assert "-XX:TieredStopAtLevel=1" in session.SHORT_LIVED_JVM_OPTIONS
    assert "spark.hadoop.fs.s3a.secret.key" not in conf  # secrets still only in the private defaults file


def test_a_short_lived_driver_keeps_its_compiler_and_its_stdout(tmp_path: Path) -> None:
    """A real JVM with the short-lived options: C1 alone would reserve 48 MB for compiled code (Spark's generated
    classes filled it during a `lake reconcile` and the JVM printed `CodeCache is full` on stdout, breaking its
    --json); the options give it 240 MB and send the JVM's own log to stderr."""
    import shutil
    import subprocess

    java = shutil.which("java")
    assert java, "java is on PATH on every machine the lake runs on"
    flags = subprocess.run([java, *session.SHORT_LIVED_JVM_OPTIONS.split(), "-XX:+PrintFlagsFinal", "-version"],
                           capture_output=True, text=True, check=True).stdout
    size = next(line.split()[3] for line in flags.splitlines() if " ReservedCodeCacheSize " in line)
    assert int(size) == 240 * 1024 * 1024
    # The JVM's own log lines (here the error of a log file it cannot open, which a default JVM prints on stdout)
    # land on stderr only.
    run = subprocess.run([java, *session.SHORT_LIVED_JVM_OPTIONS.split(), "-Xlog:gc:file=/nonexistent-dir/x.log",
                          "-version"], capture_output=True, text=True, check=False)
    assert "nonexistent-dir" not in run.stdout and "nonexistent-dir" in run.stderr


def test_no_supervised_command_line_holds_a_secret(settings: Settings) -> None:
    programs = [p for s in services.services(settings) for p in s.programs] + [services.stream_program(settings)]
    text = supervisor.render(settings, services.services(settings))
    for value in SECRETS.values():
        assert value not in text, "a secret in supervisord.conf ends up on a command line or in its file"
        for prog in programs:
            assert value not in " ".join(prog.command), f"{prog.name}'s command line holds a secret"


def test_supervisord_and_its_programs_run_with_umask_077(settings: Settings) -> None:
    assert "\numask=077\n" in supervisor.render(settings, [])


def test_every_listener_is_configured_on_lake_host(settings: Settings) -> None:
    by_name = {p.name: p for s in services.services(settings) for p in s.programs}
    assert "metastore" not in by_name  # no catalog port: each Spark process reaches PostgreSQL itself
    for name, driver, block_manager in (
            ("thrift", settings.thrift_driver_port, settings.thrift_block_manager_port),
            ("spark-connect", settings.spark_connect_driver_port, settings.spark_connect_block_manager_port)):
        cmd = " ".join(by_name[name].command)
        assert f"spark.driver.port={driver}" in cmd and f"spark.driver.blockManager.port={block_manager}" in cmd
        assert "spark.blockManager.port" not in cmd  # it would pin a cluster's executors to the same port
        assert "spark.port.maxRetries=0" in cmd
    values = template_values(settings)
    root = Path(templates.TEMPLATES)
    kafka = render_template((root / "kafka" / "server.properties").read_text(), values)
    assert (f"listeners=SASL_PLAINTEXT://127.0.0.2:{settings.kafka_port},CONTROLLER://127.0.0.2:"
            f"{settings.kafka_controller_port}") in kafka
    assert "127.0.0.1" not in _settings_lines(kafka)
    connect = render_template((root / "connect" / "worker.properties").read_text(), values)
    assert f"listeners=http://127.0.0.2:{settings.connect_port}" in connect and "127.0.0.1" not in _settings_lines(connect)
    env = services.airflow_env(settings)
    assert env["AIRFLOW__LOGGING__FILE_TASK_HANDLER_NEW_FILE_PERMISSIONS"] == "0o600"


def test_only_the_supervised_stream_takes_the_stream_ports(settings: Settings) -> None:
    conf = session.stream_ports_conf(settings, {"SUPERVISOR_PROCESS_NAME": "stream"})
    assert conf["spark.driver.port"] == str(settings.stream_driver_port)
    assert conf["spark.driver.blockManager.port"] == str(settings.stream_block_manager_port)
    assert "spark.blockManager.port" not in conf
    assert session.stream_ports_conf(settings, {}) == {}  # `lake stream run` beside it: random ports


def _settings_lines(properties: str) -> str:
    return "\n".join(line for line in properties.splitlines() if not line.lstrip().startswith("#"))


def test_the_java_helpers_compile(settings: Settings, tmp_path: Path) -> None:
    s = load_settings({"LAKE_STATE_DIR": str(tmp_path / "s"), "LAKE_CACHE_DIR": str(tmp_path / "cache")})
    out = jars.build_java_classes(s)
    for name in ("LakeMetastoreInit", "LakeThriftAuth", "LakeAnalystGuard", "LakeLocalFileSystem", "LakeConnectGuard"):
        assert (out / f"{name}.class").is_file()
    assert jars.build_java_classes(s) == out  # cached


def test_secure_state_dir_tightens_what_exists(settings: Settings) -> None:
    old = os.umask(0o022)
    try:
        logs = settings.log_dir
        logs.mkdir(parents=True)
        (logs / "kafka.log").write_text("x")
        (logs / "kafka.log").chmod(0o644)
        (settings.data_dir / "minio" / "lake").mkdir(parents=True)
        (settings.data_dir / "minio" / "lake" / "part.bin").write_text("x")
        (settings.state_dir / "exe.sh").write_text("x")
        (settings.state_dir / "exe.sh").chmod(0o755)
        assert bootstrap.secure_state_dir(settings) >= 4
        assert os.umask(0o077) == 0o077  # secure_state_dir set 077 for the whole process
    finally:
        os.umask(old)
    assert stat.S_IMODE((logs / "kafka.log").stat().st_mode) == 0o600
    assert stat.S_IMODE((settings.state_dir / "exe.sh").stat().st_mode) == 0o700
    assert stat.S_IMODE((settings.data_dir / "minio").stat().st_mode) == 0o700
    assert stat.S_IMODE((settings.data_dir / "minio" / "lake" / "part.bin").stat().st_mode) == 0o600
    # PostgreSQL's OS user (when we are root) may traverse the folders to its cluster and socket, no more.
    top = 0o710 if os.geteuid() == 0 else 0o700
    for d in (settings.state_dir, settings.data_dir, settings.run_dir):
        assert stat.S_IMODE(d.stat().st_mode) == top, d


def test_the_thrift_server_asks_for_a_password_from_a_private_file(settings: Settings) -> None:
    thrift = next(p for s in services.services(settings) for p in s.programs if p.name == "thrift")
    cmd = " ".join(thrift.command)
    assert "spark.hive.server2.authentication=CUSTOM" in cmd
    assert "-Dhive.server2.custom.authentication.class=LakeThriftAuth" in cmd
    assert str(jars.java_classes_dir(settings)) in cmd  # the compiled check is on the driver's class path
    assert thrift.env["LAKE_THRIFT_USERS_FILE"] == str(configs.thrift_users_path(settings))
    configs.render_configs(settings)
    users, password = configs.thrift_users_path(settings), configs.thrift_password_path(settings)
    assert users.read_text() == f"{configs.THRIFT_USER}=thriftPw123\n" and password.read_text() == "thriftPw123"
    assert users.stat().st_mode & 0o077 == 0 and password.stat().st_mode & 0o077 == 0


def test_every_spark_process_authenticates_and_encrypts_with_the_private_secret(settings: Settings) -> None:
    conf = session.spark_conf(settings)
    assert conf["spark.authenticate"] == "true" and conf["spark.network.crypto.enabled"] == "true"
    assert conf["spark.authenticate.secret"] == SECRETS["LAKE_SPARK_AUTH_SECRET"]
    assert "spark.authenticate.secret" not in session.public_spark_conf(settings)  # never on a command line
    assert "spark.authenticate.secret sparkAuthSecret123" in session.spark_defaults_text(settings)


def test_the_catalog_is_postgres_itself_with_the_password_only_in_the_private_file(settings: Settings) -> None:
    conf = session.spark_conf(settings)
    assert conf["spark.hadoop.hive.metastore.uris"] == ""
    assert conf["spark.hadoop.javax.jdo.option.ConnectionURL"].endswith(f":{settings.pg_port}/metastore")
    assert conf["spark.hadoop.javax.jdo.option.ConnectionPassword"] == SECRETS["LAKE_PG_METASTORE_PASSWORD"]
    assert "spark.hadoop.javax.jdo.option.ConnectionPassword" not in session.public_spark_conf(settings)
    external = load_settings({"LAKE_STATE_DIR": str(settings.state_dir), "LAKE_METASTORE_URI": "thrift://hms:9083",
                              **SECRETS})
    ext = session.spark_conf(external)
    assert ext["spark.hadoop.hive.metastore.uris"] == "thrift://hms:9083"
    assert not any(k.startswith("spark.hadoop.javax.jdo") for k in ext)


def test_only_the_analyst_servers_carry_the_guards(settings: Settings) -> None:
    by_name = {p.name: " ".join(p.command) for s in services.services(settings) for p in s.programs}
    for name in ("thrift", "spark-connect"):
        assert "LakeAnalystGuard" in by_name[name] and "spark.hadoop.fs.file.impl=LakeLocalFileSystem" in by_name[name]
        assert f"spark.lake.guard.allowedPathPrefix=s3a://{settings.s3_bucket}/" in by_name[name]
        assert str(settings.state_dir) in services.analyst_guard_conf(settings)["spark.hadoop.lake.guard.fs.deniedRoots"]
    assert "spark.connect.grpc.interceptor.classes=LakeConnectGuard" in by_name["spark-connect"]
    assert "LakeAnalystGuard" not in " ".join(services.stream_program(settings).command)
