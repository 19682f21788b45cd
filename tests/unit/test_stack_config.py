"""What spark_jobs/stack renders as a whole: config templates, supervisor sections, bucket policy, pid and socket files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spark_jobs.settings import load_settings
from spark_jobs.stack import services, supervisor
from spark_jobs.stack.bootstrap import bucket_policy
from spark_jobs.stack.configs import template_values
from spark_jobs.stack.errors import StackError
from spark_jobs.stack.services import Program
from spark_jobs.stack.templates import render_template


def test_render_template_substitutes_and_rejects_leftovers() -> None:
    assert render_template("a=@@X@@ b=${file:p:k}", {"X": "1"}) == "a=1 b=${file:p:k}"
    with pytest.raises(ValueError, match="unsubstituted placeholder near '@@Y@@"):
        render_template("a=@@X@@ b=@@Y@@", {"X": "1"})


def test_every_infra_template_renders(tmp_path: Path) -> None:
    s = load_settings({"LAKE_STATE_DIR": str(tmp_path)})
    values = template_values(s)
    conf = Path(__file__).resolve().parents[2] / "infra" / "conf"
    files = [p for p in conf.rglob("*") if p.is_file()]
    assert len(files) >= 5
    for path in files:
        rendered = render_template(path.read_text(), values)
        assert "@@" not in rendered


def test_bucket_policy_is_scoped_to_the_bucket() -> None:
    policy: Any = bucket_policy("lake")
    resources = [r for st in policy["Statement"] if st["Effect"] == "Allow" for r in st["Resource"]]
    assert resources == ["arn:aws:s3:::lake", "arn:aws:s3:::lake/*"]
    actions = {a for st in policy["Statement"] if st["Effect"] == "Allow" for a in st["Action"]}
    assert "s3:CreateBucket" not in actions and not any(a.startswith("admin:") for a in actions)


def test_supervisor_config_escapes_percent_and_quotes(tmp_path: Path) -> None:
    s = load_settings({"LAKE_STATE_DIR": str(tmp_path)})
    prog = Program(name="p", command=["/bin/echo", "a b", "100%"], env={"K": 'v%1"x'}, user="postgres")
    text = "\n".join(supervisor._program_section(s, prog))
    assert 'command=/bin/echo "a b" 100%%' in text
    assert 'environment=K="v%%1\\"x"' in text
    assert "user=postgres" in text
    assert "stopasgroup=true" in text and "killasgroup=true" in text


def test_the_stream_is_stopped_by_signalling_the_driver_alone(tmp_path: Path) -> None:
    """SIGTERM reaches the Python driver only (it stops its queries and drains); the group is killed after the wait."""
    s = load_settings({"LAKE_STATE_DIR": str(tmp_path)})
    text = "\n".join(supervisor._program_section(s, services.stream_program(s)))
    assert "stopsignal=TERM" in text and "stopasgroup=false" in text and "killasgroup=true" in text
    assert "stopwaitsecs=120" in text


def test_too_long_socket_path_is_a_clear_error(tmp_path: Path) -> None:
    s = load_settings({"LAKE_STATE_DIR": str(tmp_path / ("x" * 120))})
    with pytest.raises(StackError, match="too long for a unix socket; set LAKE_STATE_DIR"):
        supervisor.render(s, [])


def test_stale_pid_file_is_removed(tmp_path: Path) -> None:
    s = load_settings({"LAKE_STATE_DIR": str(tmp_path)})
    s.run_dir.mkdir(parents=True)
    supervisor.pid_path(s).write_text("999999\n")
    supervisor.socket_path(s).write_text("")
    assert supervisor.daemon_pid(s) is None
    assert not supervisor.pid_path(s).exists()
    assert not supervisor.socket_path(s).exists()


def test_the_spark_cluster_probe_waits_while_the_master_is_not_listening(tmp_path: Path) -> None:
    """A master still starting refuses connections: the probe says "not answering" (so `lake stack up` waits)
    instead of raising httpx's ConnectError, which is no OSError (it broke `make test-cluster`'s stack up)."""
    import socket

    from spark_jobs.stack import health

    with socket.socket() as sock:  # a port nothing listens on: bound, never listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        s = load_settings({"LAKE_STATE_DIR": str(tmp_path), "LAKE_SPARK_CLUSTER_WEBUI_PORT": str(port)})
        ok, detail = health.spark_cluster(s)
    assert not ok and "not answering" in detail and str(port) in detail


def test_a_spark_cluster_is_a_supervised_master_and_workers_on_lake_host(tmp_path: Path) -> None:
    from spark_jobs.session import public_spark_conf
    from spark_jobs.settings import SettingsError

    base = {"LAKE_STATE_DIR": str(tmp_path), "LAKE_HOST": "127.0.0.4"}
    assert "spark-cluster" not in [s.name for s in services.services(load_settings(base))]
    with pytest.raises(SettingsError, match=r"LAKE_SPARK_MASTER=spark://\{host\}"):
        load_settings({**base, "LAKE_SPARK_CLUSTER_WORKERS": "2"})
    s = load_settings({**base, "LAKE_SPARK_CLUSTER_WORKERS": "2", "LAKE_SPARK_MASTER": "spark://127.0.0.4:17077"})
    cluster = next(sv for sv in services.services(s) if sv.name == "spark-cluster")
    assert [p.name for p in cluster.programs] == ["spark-master", "spark-worker-1", "spark-worker-2"]
    assert cluster.ports == (17077, 18085, 17080, 17081, 17082, 17083)
    for program in cluster.programs:
        assert program.command[program.command.index("--host") + 1] == "127.0.0.4"
        assert program.env["SPARK_LOCAL_IP"] == "127.0.0.4" and program.env["PYSPARK_PYTHON"]
    assert cluster.programs[1].command[-1] == "spark://127.0.0.4:17077"
    conf = public_spark_conf(s)
    assert conf["spark.cores.max"] == "2" and conf["spark.driver.host"] == "127.0.0.4"
    # 2 workers x 3 slots cannot hold the stack's 4 applications of 2 cores: the last would wait forever.
    with pytest.raises(SettingsError, match=r"6 core slots.*LAKE_SPARK_CLUSTER_WORKER_CORES"):
        load_settings({**base, "LAKE_SPARK_CLUSTER_WORKERS": "2", "LAKE_SPARK_MASTER": "spark://127.0.0.4:17077",
                       "LAKE_SPARK_CLUSTER_WORKER_CORES": "3"})
    # 3g per worker held three 1 GB executors: `lake sql` waited forever beside the stream, Connect and Thrift.
    with pytest.raises(SettingsError, match=r"LAKE_SPARK_CLUSTER_WORKER_MEMORY=3g .* at least 4g"):
        load_settings({**base, "LAKE_SPARK_CLUSTER_WORKERS": "2", "LAKE_SPARK_MASTER": "spark://127.0.0.4:17077",
                       "LAKE_SPARK_CLUSTER_WORKER_MEMORY": "3g"})
