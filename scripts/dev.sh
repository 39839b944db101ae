#!/usr/bin/env bash
# One command to a local Baton cluster: installs what is missing (Debian: redis-server,
# postgresql, nginx), builds, and runs `baton dev`, which starts Redis, Postgres, three
# nodes behind nginx and two runners, runs a demo task, and stops it all on Ctrl-C.
# Arguments go to `baton dev` (see `target/debug/baton dev --help`), e.g. --port 9090.
set -euo pipefail
cd "$(dirname "$0")/.."

have_initdb() {
    command -v initdb >/dev/null 2>&1 || compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null
}
have_nginx() {
    command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]
}

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
have_initdb || missing+=(postgresql)
have_nginx || missing+=(nginx)

if [ ${#missing[@]} -gt 0 ]; then
    echo "dev.sh: installing ${missing[*]}"
    sudo=()
    [ "$(id -u)" -eq 0 ] || sudo=(sudo)
    "${sudo[@]}" apt-get update
    # The packages' own services are not needed (baton dev runs private instances), but
    # Debian starts them where it can; that is harmless, as baton dev uses other ports.
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
fi

cargo build
exec target/debug/baton dev "$@"
