#!/usr/bin/env bash
# Runs every test: unit tests, and the integration tests against real Redis and Postgres
# with real `baton` processes. Uses the servers at BATON_TEST_REDIS_URL and
# BATON_TEST_DATABASE_URL (defaults: the local ones on 6379 and 5432); when one is not
# reachable it installs (Debian) and starts a private one. Arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

export BATON_TEST_REDIS_URL=${BATON_TEST_REDIS_URL:-redis://127.0.0.1:6379}
export BATON_TEST_DATABASE_URL=${BATON_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
services=${BATON_TEST_SERVICES_DIR:-/tmp/baton-test-services}

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
as_postgres() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

pg_bin() {
    local d
    for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        [ -x "$d/initdb" ] && { echo "$d"; return; }
    done
    dirname "$(command -v initdb)"
}

# The tests also run `baton dev --smoke`, which needs nginx, redis-server and initdb; the
# drill steps clocks with libfaketime.
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v psql >/dev/null 2>&1 && { command -v initdb >/dev/null 2>&1 || compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; } || missing+=(postgresql)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx)
compgen -G '/usr/lib/*/faketime/libfaketime.so.1' >/dev/null || missing+=(faketime)
# The store-security tests make a CA and server certificates at run time.
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
# The store-failover tests run Postgres under pg_auto_failover, for the installed version.
if ! command -v pg_autoctl >/dev/null 2>&1; then
    pg_major=$(ls /usr/lib/postgresql 2>/dev/null | sort -V | tail -n 1)
    missing+=("postgresql-${pg_major:-15}-auto-failover")
fi
# The sandbox backend of runners on demand (tests/dynamic_runners.rs) runs bubblewrap.
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
# The console test (tests/ui.rs) drives Chromium with playwright-core, under Node.js.
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
    echo "test.sh: installing ${missing[*]}"
    as_root apt-get update
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
fi

# The OpenAPI test fuzzes a live node with Schemathesis.
if ! command -v st >/dev/null 2>&1; then
    echo "test.sh: installing schemathesis"
    python3 -m pip install --quiet schemathesis
fi
# The Python client test validates the OpenAPI document and generates a client from it.
if ! python3 -c 'import openapi_spec_validator' >/dev/null 2>&1 \
    || ! command -v openapi-python-client >/dev/null 2>&1; then
    echo "test.sh: installing openapi-spec-validator and openapi-python-client"
    python3 -m pip install --quiet openapi-spec-validator openapi-python-client
fi
# The metrics test reads /metrics with Prometheus's own text parser.
if ! python3 -c 'import prometheus_client' >/dev/null 2>&1; then
    echo "test.sh: installing prometheus-client"
    python3 -m pip install --quiet prometheus-client
fi
# The deployment test renders the Helm chart with the Helm engine and validates what it
# renders against the Kubernetes schemas.
if ! python3 -c 'import helm_python, kubernetes_validate' >/dev/null 2>&1; then
    echo "test.sh: installing helm-python-sdk and kubernetes-validate"
    python3 -m pip install --quiet helm-python-sdk kubernetes-validate
fi

# playwright-core at the version tests/ui/package-lock.json pins; it downloads no browser
# (the test uses the system's Chromium).
if [ ! -d tests/ui/node_modules/playwright-core ] \
    || [ tests/ui/package-lock.json -nt tests/ui/node_modules/.package-lock.json ]; then
    echo "test.sh: installing playwright-core"
    (cd tests/ui && npm ci --no-audit --no-fund --loglevel=error)
fi

# The OpenAPI document's TypeScript test (tests/openapi_typescript.rs): redocly and the
# two client generators, at the versions tests/openapi_ts/package-lock.json pins.
if [ ! -d tests/openapi_ts/node_modules/typescript ] \
    || [ tests/openapi_ts/package-lock.json -nt tests/openapi_ts/node_modules/.package-lock.json ]; then
    echo "test.sh: installing the TypeScript client tools"
    (cd tests/openapi_ts && npm ci --no-audit --no-fund --loglevel=error)
fi

if ! redis-cli -u "$BATON_TEST_REDIS_URL" ping >/dev/null 2>&1; then
    port=56379
    echo "test.sh: no Redis at $BATON_TEST_REDIS_URL; starting one on $port"
    mkdir -p "$services/redis"
    redis-server --daemonize yes --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
        --dir "$services/redis" --logfile "$services/redis/redis.log"
    export BATON_TEST_REDIS_URL="redis://127.0.0.1:$port"
    for _ in $(seq 50); do redis-cli -u "$BATON_TEST_REDIS_URL" ping >/dev/null 2>&1 && break; sleep 0.1; done
fi

if ! psql "$BATON_TEST_DATABASE_URL" -qtAc 'select 1' >/dev/null 2>&1; then
    port=55432
    data="$services/pg"
    echo "test.sh: no Postgres at $BATON_TEST_DATABASE_URL; starting one on $port"
    bin=$(pg_bin)
    if [ ! -f "$data/PG_VERSION" ]; then
        mkdir -p "$data"
        [ "$(id -u)" -eq 0 ] && chown -R postgres "$services" && chmod 755 "$services"
        as_postgres "$bin/initdb" -D "$data" -A trust -U postgres --no-sync >/dev/null
    fi
    as_postgres "$bin/pg_ctl" -D "$data" -l "$data/server.log" -w start \
        -o "-p $port -k $data -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300" >/dev/null \
        || as_postgres "$bin/pg_ctl" -D "$data" status >/dev/null
    export BATON_TEST_DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres"
fi

# Databases left behind by an interrupted earlier run.
psql "$BATON_TEST_DATABASE_URL" -qtAc \
    "select 'DROP DATABASE \"' || datname || '\" WITH (FORCE);' from pg_database where datname like 'baton_t_%'" \
    | psql "$BATON_TEST_DATABASE_URL" -q >/dev/null

echo "test.sh: redis $BATON_TEST_REDIS_URL, postgres $BATON_TEST_DATABASE_URL"
rm -f target/chaos-report.txt target/schemathesis.txt
# The dependency tree's licenses, sources and advisories (deny.toml). Its failure fails
# the run, after the tests have had their say.
deny=0
./scripts/deny.sh || deny=$?
# Lints stay clean: a clippy warning fails the run, after the tests have had their say.
clippy=0
cargo clippy --workspace --all-targets --quiet -- -D warnings || clippy=$?
cargo test --workspace --no-fail-fast "$@"
# For the record: the failover drill's report (tests/chaos.rs) and the fuzzer's summary
# (tests/openapi.rs).
if [ -f target/chaos-report.txt ]; then
    sed -n '/^baton chaos report/,$p' target/chaos-report.txt
fi
if [ -f target/schemathesis.txt ]; then
    sed -n '/SUMMARY/,$p' target/schemathesis.txt
fi
if [ "$clippy" -ne 0 ]; then
    echo "test.sh: cargo clippy found warnings (see above)" >&2
    exit "$clippy"
fi
if [ "$deny" -ne 0 ]; then
    echo "test.sh: cargo deny failed (see above)" >&2
    exit "$deny"
fi
