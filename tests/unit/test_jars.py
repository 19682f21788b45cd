"""Which jars Spark gets: a job under spark-submit (pyspark imported from pyspark.zip) sees the same list."""

from __future__ import annotations

from pathlib import Path

import pyspark
import pytest

from spark_jobs import jars
from spark_jobs.jars import artifact_name, select_extra_jars


def _fake_spark_home(tmp_path: Path) -> Path:
    home = tmp_path / "site-packages" / "pyspark"
    (home / "jars").mkdir(parents=True)
    (home / "jars" / "jackson-core-2.18.2.jar").write_text("")
    (home / "python" / "lib" / "pyspark.zip" / "pyspark").mkdir(parents=True)
    return home


def test_pyspark_imported_from_the_zip_finds_spark_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = _fake_spark_home(tmp_path)
    monkeypatch.setattr(pyspark, "__file__", str(home / "python" / "lib" / "pyspark.zip" / "pyspark" / "__init__.py"))
    monkeypatch.delenv("SPARK_HOME", raising=False)
    assert jars.pyspark_home() == home  # the enclosing pyspark install
    monkeypatch.setenv("SPARK_HOME", str(home))
    assert jars.pyspark_home() == home


def test_no_jars_folder_anywhere_is_an_error_not_an_empty_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    odd = tmp_path / "somewhere" / "pyspark"
    odd.mkdir(parents=True)
    monkeypatch.setattr(pyspark, "__file__", str(odd / "__init__.py"))
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "nope"))
    with pytest.raises(jars.MissingArtifactError, match="jars/ folder"):
        jars.pyspark_home()


def test_extra_jars_skip_what_spark_ships(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = _fake_spark_home(tmp_path)
    monkeypatch.setattr(pyspark, "__file__", str(home / "python" / "lib" / "pyspark.zip" / "pyspark" / "__init__.py"))
    provided = {jars.artifact_name(p.name) for p in (jars.pyspark_home() / "jars").glob("*.jar")}
    assert jars.select_extra_jars(["jackson-core-2.13.5.jar", "delta-spark_4.1_2.13-4.4.0.jar"], provided) == [
        "delta-spark_4.1_2.13-4.4.0.jar"]


def test_artifact_name_strips_versions() -> None:
    assert artifact_name("jackson-core-2.13.5.jar") == "jackson-core"
    assert artifact_name("delta-spark_4.1_2.13-4.4.0.jar") == "delta-spark_4.1_2.13"
    assert artifact_name("wildfly-openssl-2.1.4.Final.jar") == "wildfly-openssl"
    assert artifact_name("spark-sql-kafka-0-10_2.13-4.1.3.jar") == "spark-sql-kafka-0-10_2.13"


def test_pyspark_copy_of_a_jar_wins() -> None:
    candidates = ["jackson-core-2.13.5.jar", "hadoop-aws-3.4.2.jar", "scala-library-2.13.17.jar", ".lake-stamp"]
    assert select_extra_jars(candidates, {"jackson-core", "scala-library"}) == ["hadoop-aws-3.4.2.jar"]
