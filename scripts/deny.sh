#!/usr/bin/env bash
# Checks the dependency tree with cargo deny (deny.toml): licenses, banned and duplicate
# crates, sources, and security advisories. Installs cargo-deny when it is missing.
#
# The advisory database is fetched from GitHub. On a machine that cannot reach it the
# advisories check cannot run: this says so and goes on with the rest, unless
# BATON_DENY_REQUIRE_ADVISORIES=1, which makes that a failure.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo deny --version >/dev/null 2>&1; then
    echo "deny.sh: installing cargo-deny"
    cargo install --locked --quiet cargo-deny
fi

cargo deny --log-level error check licenses bans sources

if cargo deny --log-level error fetch db >/dev/null 2>&1; then
    cargo deny --log-level error check advisories
elif [ "${BATON_DENY_REQUIRE_ADVISORIES:-0}" = 1 ]; then
    echo "deny.sh: the RustSec advisory database cannot be fetched from here" >&2
    exit 1
else
    echo "deny.sh: advisories NOT checked: the RustSec advisory database (github.com) cannot be fetched from this machine"
fi
