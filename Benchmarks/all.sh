#!/usr/bin/env bash
# Every performance figure in the README's "Performance" section, in one run on this machine:
# verification and tokens side by side with OpenSSL and Apple's Python library
# (compare.sh), redemptions over HTTP (load-redemptions.sh), two instances on one
# PostgreSQL against SQLite (load-postgres.sh), downloads against nginx (load-downloads.sh), content in a bucket on moto
# (load-objectstore.sh). Each prints its own table of ratios; a copy of everything goes to
# .build-release/performance.txt.
#
#   Benchmarks/all.sh
#   SECONDS_EACH=10 Benchmarks/all.sh
#
# Needs openssl, cc, libssl-dev, python3 (venv), wrk, nginx and postgresql (apt-get install
# wrk nginx postgresql), and moto in .build-venv (.ci/run). Takes about 11 minutes after the release build. Run it on an otherwise idle machine: the
# ratios are measured together, but the load generator and the server share the cores.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .build-release
{
    echo "# Coffer performance, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "## Verification and tokens (one core)"
    Benchmarks/compare.sh
    echo
    echo "## Redemptions over HTTP"
    Benchmarks/load-redemptions.sh
    echo
    echo "## Two instances on one PostgreSQL, against SQLite"
    Benchmarks/load-postgres.sh
    echo
    echo "## Downloads (16 connections)"
    Benchmarks/load-downloads.sh
    echo
    echo "## Content in a bucket (moto)"
    Benchmarks/load-objectstore.sh
} | tee .build-release/performance.txt
