#!/usr/bin/env bash
# Install everything Lakestream needs on a fresh Debian machine, idempotently.
# Caches: pip -> ~/.cache/pip, Maven -> ~/.m2, Go -> ~/go/pkg/mod and ~/.cache/go-build,
# our artifacts -> ${LAKE_CACHE_DIR:-~/.cache/lakestream, or /var/cache/lakestream as root}. A second run reuses them.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "$(id -u)" -eq 0 ]; then
  # Run as root, `lake` switches to an unprivileged user (spark_jobs.stack.service_user) who must read the
  # artifacts; root's home is private, so root's cache lives in /var/cache (the same default as the settings).
  CACHE="${LAKE_CACHE_DIR:-/var/cache/lakestream}"
  if [ -z "${LAKE_CACHE_DIR:-}" ] && [ ! -e "$CACHE" ] && [ -d "$HOME/.cache/lakestream" ]; then
    # Keep an earlier cache warm: hard links (no copy) when on the same file system.
    mkdir -p "$(dirname "$CACHE")" && { cp -al "$HOME/.cache/lakestream" "$CACHE" 2>/dev/null || cp -a "$HOME/.cache/lakestream" "$CACHE"; }
  fi
else
  CACHE="${LAKE_CACHE_DIR:-$HOME/.cache/lakestream}"
fi
VENV="${LAKE_VENV:-$REPO/.venv}"
if [ -z "${PYTHON:-}" ] && [ "$(id -u)" -eq 0 ] && [ -x /usr/bin/python3.11 ]; then
  # As root: the system's Python 3.11, which the service user lake switches to can run (a pyenv or other
  # interpreter under root's private home cannot be reached by it; spark_jobs.stack.service_user).
  PYTHON=/usr/bin/python3.11
fi
PYTHON="${PYTHON:-python3.11}"
MINIO_MODULE="github.com/minio/minio"
# Newest pseudo-version on the Go module proxy (the repository was archived;
# the RELEASE.* tags are not semver and the proxy does not serve them).
MINIO_VERSION="v0.0.0-20260212201848-7aac2a2c5b7c"
MVN=(mvn -B -s "$REPO/infra/jvm/settings.xml")

step() { printf '\n==> %s\n' "$*"; }
die() { printf 'setup: %s\n' "$*" >&2; exit 1; }
# Content hash only (not the path), so every clone shares the same caches.
sha() { cat "$@" | sha256sum | cut -c1-16; }
SECONDS=0

step "checking tools"
command -v "$PYTHON" >/dev/null || die "$PYTHON not found; install Python 3.11 or set PYTHON=/path/to/python3.11"
command -v java >/dev/null || die "java not found; install a JDK 17 (apt-get install openjdk-17-jdk-headless)"
java -version 2>&1 | grep -qE 'version "(17|2[0-9])' || die "Java 17+ required, found: $(java -version 2>&1 | head -1)"
command -v mvn >/dev/null || die "mvn not found; apt-get install maven"
command -v go >/dev/null || die "go not found; MinIO is built from its Go module (Go >= 1.24)"
if ! command -v initdb >/dev/null && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    step "installing PostgreSQL 15 server binaries (apt)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15 >/dev/null; } \
      || die "apt-get could not install postgresql-15 (see above); install it, or fix the apt sources, and rerun"
  else
    die "PostgreSQL server binaries not found; sudo apt-get install postgresql-15"
  fi
fi
# The browser test of the Airflow UI drives Debian's Chromium through Playwright (Playwright's own
# browser download cannot work without its CDN); `make test` needs it, `make demo` does not.
if ! command -v chromium >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    step "installing Debian's chromium (browser test of the Airflow UI)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
      || die "apt-get could not install chromium (see above); install it, or fix the apt sources, and rerun"
  else
    echo "warning: chromium not found; the Airflow UI browser test will fail (sudo apt-get install chromium)" >&2
  fi
fi
echo "ok ($(java -version 2>&1 | head -1), $(go version | cut -d' ' -f3), $("$PYTHON" --version))"

step "Python environment $VENV"
# Everything from the hash-locked files (make lock; docs/operations.md, Setup): pip refuses any file whose hash is not pinned,
# and builds (pyspark is an sdist, the project itself) use the pinned setuptools/wheel, not an unhashed download.
stamp="$VENV/.lake-stamp"
want="$(sha "$REPO/pyproject.toml" "$REPO/requirements.lock" "$REPO/requirements-build.lock")"
base="$("$PYTHON" -c 'import sys; print(sys.base_prefix)')"
if [ -x "$VENV/bin/python" ] && [ "$("$VENV/bin/python" -c 'import sys; print(sys.base_prefix)' 2>/dev/null)" != "$base" ]; then
  echo "recreating $VENV on $PYTHON ($base): it was made with another Python"
  rm -rf "$VENV"
fi
if [ ! -x "$VENV/bin/python" ]; then "$PYTHON" -m venv "$VENV"; fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  "$VENV/bin/pip" install -q --require-hashes -r "$REPO/requirements-build.lock" \
    || die "pip could not install requirements-build.lock (pip, setuptools, wheel; see above)"
  # pyspark is ~450 MB; pip keeps the built wheel in ~/.cache/pip for next time.
  "$VENV/bin/pip" install --progress-bar on --require-hashes --no-build-isolation -r "$REPO/requirements.lock" \
    || die "pip could not install requirements.lock (see above: a download failed or a hash differs; a changed pin in pyproject.toml needs make lock)"
  "$VENV/bin/pip" install -q --no-deps --no-build-isolation -e "$REPO" || die "pip could not install the project itself (-e $REPO)"
  "$VENV/bin/pip" check || die "the venv's packages do not fit together (pip check, above); run make lock and rerun"
  echo "$want" > "$stamp"
else
  "$VENV/bin/pip" install -q --no-deps --no-build-isolation -e "$REPO" >/dev/null
  echo "up to date"
fi

verify_jars() {  # group: every file against infra/jvm/checksums.sha256 (make jar-checksums after a version bump)
  "$VENV/bin/python" -m spark_jobs.cli.jar_checksums verify "$CACHE/jars" "$1" \
    || die "the $1 jars in $CACHE/jars/$1 do not match infra/jvm/checksums.sha256 (each file named above)"
}

resolve() {  # group, maven goal args...
  local group="$1"; shift
  local dest="$CACHE/jars/$group" pom="$REPO/infra/jvm/$group/pom.xml"
  local want; want="$(sha "$pom")"
  if [ "$(cat "$dest/.lake-stamp" 2>/dev/null)" = "$want" ]; then
    verify_jars "$group"; return
  fi
  rm -rf "$dest" "$CACHE/jars/.markers-$group"; mkdir -p "$dest"
  echo "resolving $group artifacts from Maven Central into $dest (cached in ~/.m2)"
  # A bar of the downloads on a terminal; otherwise the "Downloaded from", BUILD and ERROR lines (CI logs).
  # Maven's own exit status decides (PIPESTATUS): a failed download leaves a partial set, never stamped.
  local log; log="$(mktemp)"
  set +e
  "${MVN[@]}" -f "$pom" "$@" 2>&1 | tee "$log" | "$VENV/bin/python" -m spark_jobs.cli.progress_lines maven --label "$group"
  local status=("${PIPESTATUS[@]}")
  set -e
  if [ "${status[0]}" -ne 0 ] || [ "${status[1]}" -ne 0 ] || [ "${status[2]}" -ne 0 ]; then
    local why; why="$(grep -E '^\[ERROR\] .*(artifact|resolve|transfer|find|Failed)' "$log" | head -3 | cut -c1-400)"
    rm -f "$log"
    die "Maven failed (exit ${status[0]}) resolving the $group artifacts (infra/jvm/$group/pom.xml) into $dest; nothing was stamped, the next run retries.${why:+
$why}"
  fi
  rm -f "$log"
  [ "$(ls -A "$dest")" ] || die "Maven resolved nothing for $group; see the output above (is Maven Central reachable?)"
  verify_jars "$group"
  echo "$want" > "$dest/.lake-stamp"
}

step "JVM artifacts (Kafka, Connect, Debezium, Spark extras)"
resolve kafka dependency:copy-dependencies -DoutputDirectory="$CACHE/jars/kafka" -DincludeScope=runtime
resolve debezium dependency:unpack -Ddebezium.plugin.dir="$CACHE/jars/debezium" -Ddebezium.markers.dir="$CACHE/jars/.markers-debezium"
resolve spark dependency:copy-dependencies -DoutputDirectory="$CACHE/jars/spark" -DincludeScope=runtime

step "MinIO server ($MINIO_MODULE@$MINIO_VERSION)"
bin="$CACHE/bin/minio"
if [ -x "$bin" ] && [ "$(cat "$bin.version" 2>/dev/null)" = "$MINIO_VERSION" ]; then
  echo "up to date ($bin)"
else
  mkdir -p "$CACHE/bin"
  echo "building from the Go module proxy (first time ~5 min on 2 cores; cached in ~/go and ~/.cache/go-build)"
  # The bar's total, when the module's source is already in Go's module cache (~1 s; an upper bound: packages
  # still in the build cache are not compiled again). Without it the bar counts up with no total.
  total="$(cd "$(go env GOMODCACHE)/$MINIO_MODULE@$MINIO_VERSION" 2>/dev/null \
    && GOFLAGS=-mod=mod go list -deps . 2>/dev/null | wc -l)" || total=""
  # A bar on a terminal; otherwise a line per 50 packages (CI logs). Compile errors are printed either way.
  # go's own exit status decides (PIPESTATUS): a failed download or build must not leave an older binary in use.
  set +e
  GOBIN="$CACHE/bin" GOFLAGS=-mod=mod go install -v "$MINIO_MODULE@$MINIO_VERSION" 2>&1 \
    | "$VENV/bin/python" -m spark_jobs.cli.progress_lines go --label MinIO ${total:+--total "$total"}
  status=("${PIPESTATUS[@]}")
  set -e
  [ "${status[0]}" -eq 0 ] || die "go install $MINIO_MODULE@$MINIO_VERSION failed (exit ${status[0]}; its errors are above: a module download from the Go proxy or the build)"
  [ -x "$bin" ] || die "go install $MINIO_MODULE@$MINIO_VERSION produced no binary"
  echo "$MINIO_VERSION" > "$bin.version"
fi

# Data Docs web assets: the npm packages GX's page templates load from CDNs (bootstrap, jQuery, vega, ...),
# from the npm registry, each tarball checked against the sha512 pinned in spark_jobs/quality/docs_assets.py,
# into $CACHE/web/npm, which the dq-docs service serves. A failed download or checksum stops setup.
data_docs_assets() {
  step "Data Docs web assets (npm registry, sha512-pinned)"
  "$VENV/bin/python" -m spark_jobs.quality.docs_assets install --cache-dir "$CACHE" \
    || die "Data Docs assets could not be installed into $CACHE/web/npm (see the error above)"
}
data_docs_assets

if [ "$(id -u)" -eq 0 ]; then
  rm -rf "$CACHE/classes"  # compiled helpers now live in each state dir (built by lake stack up)
  chmod -R go+rX "$CACHE"  # readable by the service user lake switches to; nothing secret in it
fi

step "setup done in ${SECONDS}s"
