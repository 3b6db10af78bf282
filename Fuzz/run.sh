#!/usr/bin/env bash
# Build and run Coffer's libFuzzer targets (Swift -sanitize=fuzzer,address).
#
#   Fuzz/run.sh TARGET SECONDS     # FuzzReceipt | FuzzReceiptPayload | FuzzJWS | FuzzToken
#   Fuzz/run.sh all SECONDS        # each target in turn
#   Fuzz/run.sh smoke              # CI: every target briefly; fails on any crash
#
# Seeds come from the real vectors in Tests/CofferCoreTests/Fixtures (and tokens minted with
# the target's fixed key); the working corpus and crash artifacts live in .build-fuzz/work/
# (git-ignored). A crash input is kept: copy it into
# Tests/CofferCoreTests/Fixtures/fuzz-regressions/<target>-<name> so the suite replays it.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SCRATCH=$ROOT/.build-fuzz
WORK=$SCRATCH/work
F=$ROOT/Tests/CofferCoreTests/Fixtures
TARGETS=(FuzzReceipt FuzzReceiptPayload FuzzJWS FuzzToken)

build() {
    echo "building fuzz targets (release, -sanitize=fuzzer,address) …" >&2
    swift build --package-path Fuzz --scratch-path "$SCRATCH" -c release -Xswiftc -sanitize=fuzzer,address -Xswiftc -g >&2
}

seed() {
    local target=$1 dir=$WORK/$1/seeds
    [ -d "$dir" ] && return 0
    mkdir -p "$dir"
    case $target in
    FuzzReceipt) cp "$F"/legacy/*.der "$F"/xcode/*.der "$dir"/ 2>/dev/null || true ;;
    FuzzReceiptPayload)
        for f in "$F"/legacy/*.der "$F"/xcode/*.der; do
            openssl cms -verify -noverify -binary -inform DER -in "$f" -out "$dir/$(basename "$f").payload" 2>/dev/null ||
                openssl smime -verify -noverify -binary -inform DER -in "$f" -out "$dir/$(basename "$f").payload" 2>/dev/null || true
        done ;;
    FuzzJWS) cp "$F"/jws/*.jws "$dir"/ 2>/dev/null || true ;;
    FuzzToken)
        python3 - "$dir" <<'PY'
import base64, hashlib, hmac, struct, sys
out = sys.argv[1]
def b64(b): return base64.urlsafe_b64encode(b).rstrip(b"=").decode()
def token(kid, key, exp, fields):
    payload = struct.pack(">q", exp) + b"".join(bytes([len(f)]) + f for f in fields)
    signed = "v1.%s.%s" % (kid, b64(payload))
    return signed + "." + b64(hmac.new(key, signed.encode(), hashlib.sha256).digest())
k1, old = b"coffer-fuzz-token-key-0123456789", b"coffer-fuzz-retired-key-01234567"
cases = [("k1", k1, 1800000000, [b"level-1", b"a" * 64, b"r-1"]), ("k1", k1, 1600000000, [b"x", b"", b""]),
         ("old", old, 1800000000, [b"tiles", b"b" * 64, b"0f4c-uuid"]), ("k1", k1, 1800000000, [b"\xff" * 40, b"c" * 64, b"r" * 36])]
for i, c in enumerate(cases):
    open("%s/token%d" % (out, i), "w").write(token(*c))
PY
        ;;
    esac
}

run() {
    local target=$1 seconds=$2
    seed "$target"
    mkdir -p "$WORK/$target/corpus" "$WORK/$target/artifacts"
    local max_len=65536
    [ "$target" = FuzzToken ] && max_len=1024
    echo "fuzzing $target for ${seconds}s …" >&2
    SWIFT_BACKTRACE=enable=no ASAN_OPTIONS=detect_leaks=0:${ASAN_OPTIONS:-} "$SCRATCH/release/$target" "$WORK/$target/corpus" "$WORK/$target/seeds" \
        -max_total_time="$seconds" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 -detect_leaks=0 -print_final_stats=1 \
        -artifact_prefix="$WORK/$target/artifacts/" 2>&1 | tee "$WORK/$target/last-run.log" | grep -E "^#[0-9]+.*(INITED|DONE|pulse)|stat::|ERROR|SUMMARY|Test unit written" >&2
}

case ${1:-} in
all)
    build
    for t in "${TARGETS[@]}"; do run "$t" "${2:-60}"; done ;;
smoke)
    build
    for t in "${TARGETS[@]}"; do run "$t" "${2:-15}"; done ;;
Fuzz*)
    build
    run "$1" "${2:-60}" ;;
*)
    sed -n '2,12p' "$0"
    exit 2 ;;
esac
