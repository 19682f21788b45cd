"""make setup's line-progress helper (spark_jobs/cli/progress_lines.py): plain lines off a terminal, errors always."""

from __future__ import annotations

import io

import pytest
from click.testing import CliRunner

from spark_jobs.cli import progress_lines
from spark_jobs.cli.progress_lines import GO_EVERY, TOOLS, follow, main

# `mvn -B dependency:copy-dependencies` output, cut down.
MAVEN = """\
[INFO] Scanning for projects...
[INFO] --- dependency:3.6.1:copy-dependencies (default-cli) @ lake-kafka ---
[INFO] Downloading from central: https://repo.maven.apache.org/maven2/.../kafka-clients-3.9.0.pom
[INFO] Downloaded from central: https://repo.maven.apache.org/maven2/.../kafka-clients-3.9.0.pom (1.9 kB at 12 kB/s)
[INFO] Downloaded from central: https://repo.maven.apache.org/maven2/.../slf4j-api-2.0.9.jar (65 kB at 1 MB/s)
[ERROR] Failed to execute goal on project lake-kafka: Could not resolve dependencies
[INFO] BUILD FAILURE
[INFO] Total time:  3.2 s
"""
# What setup's `grep -E "Downloaded from|BUILD|ERROR" | sed -E 's/^\\[INFO\\] //' | awk '{print "  " $0}'` printed.
MAVEN_PLAIN = """\
  Downloaded from central: https://repo.maven.apache.org/maven2/.../kafka-clients-3.9.0.pom (1.9 kB at 12 kB/s)
  Downloaded from central: https://repo.maven.apache.org/maven2/.../slf4j-api-2.0.9.jar (65 kB at 1 MB/s)
  [ERROR] Failed to execute goal on project lake-kafka: Could not resolve dependencies
  BUILD FAILURE
"""

GO_ERROR = ["# github.com/minio/minio/internal/config", "internal/config/config.go:42:7: undefined: foo"]


def _go_output(packages: int, downloads: int = 0) -> list[str]:
    """`go install -v` output: module downloads, then one import path per compiled package, a compile error."""
    lines = [f"go: downloading github.com/dep/m{i} v1.0.{i}" for i in range(downloads)]
    lines += [f"github.com/minio/minio/internal/p{i}" for i in range(packages)]
    return [line + "\n" for line in lines[:70] + GO_ERROR + lines[70:]]


def test_maven_off_a_terminal_prints_what_the_grep_sed_awk_pipe_printed() -> None:
    out = io.StringIO()
    counts = follow(io.StringIO(MAVEN), TOOLS["maven"], terminal=False, out=out)
    assert out.getvalue() == MAVEN_PLAIN
    assert counts == (2, 0)


def test_go_off_a_terminal_prints_every_50th_line_and_every_error() -> None:
    out = io.StringIO()
    counts = follow(_go_output(packages=100, downloads=30), TOOLS["go"], terminal=False, out=out)
    # As the awk before: a line per 50 (downloads count too); the compile error, which awk swallowed, in place.
    assert out.getvalue().splitlines() == ["  ... 50 packages compiled", *GO_ERROR, "  ... 100 packages compiled"]
    assert counts == (100, 30)
    assert GO_EVERY == 50


@pytest.mark.parametrize(("line", "kind"), [
    ("github.com/minio/minio/cmd", "count"),
    ("vendor/golang.org/x/crypto/chacha20", "count"),
    ("go: downloading github.com/klauspost/compress v1.18.0", "aux"),
    ("# github.com/minio/minio/cmd", "show"),
    ("cmd/server-main.go:12:2: undefined: x", "show"),
    ("go: github.com/minio/minio@v0.0.0: missing go.sum entry", "show"),
])
def test_go_lines_that_are_not_a_package_or_a_download_are_shown(line: str, kind: str) -> None:
    assert progress_lines.go_line(line)[0] == kind


def test_on_a_terminal_errors_still_print_and_a_summary_follows(capsys: pytest.CaptureFixture[str]) -> None:
    counts = follow(io.StringIO(MAVEN), TOOLS["maven"], terminal=True, label="kafka")
    assert counts == (2, 0)
    out, err = capsys.readouterr()
    shown = out + err  # above the bar: rich's console (stderr)
    assert "[ERROR] Failed to execute goal" in shown and "BUILD FAILURE" in shown
    assert "Downloaded from" not in shown  # counted by the bar instead
    assert "2 artifacts downloaded in " in out

    follow(_go_output(packages=60, downloads=2), TOOLS["go"], terminal=True, label="MinIO", total=1300)
    out, err = capsys.readouterr()
    assert all(line in out + err for line in GO_ERROR)
    assert "60 packages compiled, 2 modules downloaded in " in out


def test_the_command_reads_stdin_and_always_exits_0() -> None:
    result = CliRunner().invoke(main, ["maven", "--label", "kafka"], input=MAVEN.encode() + b"[ERROR] \xff bad byte\n")
    assert result.exit_code == 0, result.output
    assert result.output == MAVEN_PLAIN + "  [ERROR] \ufffd bad byte\n"  # CliRunner's stdout is no terminal
