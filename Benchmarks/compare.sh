#!/usr/bin/env bash
# Side-by-side: OpenSSL's reference points and Coffer, measured in one run on this machine,
# printed as ratios (absolute rates drift on shared machines; ratios measured together don't).
#
#   Benchmarks/compare.sh            # 3 s per measurement
#   SECONDS_EACH=10 Benchmarks/compare.sh
#
# Needs: openssl, cc, libssl-dev. Builds coffer in release into .build-release/.
set -euo pipefail
cd "$(dirname "$0")/.."
S=${SECONDS_EACH:-3}
F=Tests/CofferCoreTests/Fixtures
OUT=.build-release/compare
mkdir -p "$OUT"

echo "building coffer (release) …" >&2
swift build -c release --product coffer --scratch-path .build-release >&2
BIN=.build-release/release/coffer
cc -O2 -o "$OUT/pkcs7_verify" Benchmarks/pkcs7_verify.c -lcrypto

rate() { awk -F': ' '/^verify: /{sub("/s","",$2); print $2}'; }
epoch() { date -u -d "$1" +%s; }

echo "openssl speed (one core) …" >&2
rsa=$(openssl speed -seconds "$S" rsa2048 2>/dev/null | awk '/^rsa 2048 bits/{print $NF}')
ecdsa=$(openssl speed -seconds "$S" ecdsap256 2>/dev/null | awk '/nistp256/{print $NF}')
# One HMAC-SHA256 over 256 bytes (a token's MAC covers ~180): the floor under token verify.
hmac=$(openssl speed -seconds "$S" -bytes 256 -hmac sha256 2>/dev/null | awk '/^hmac/{v=$2; sub("k", "", v); printf "%d", v * 1000 / 256}')

# The vectors are Production and Sandbox data; Apple's roots vouch for Sandbox only when asked.
ENVS=(--environment Production --environment Sandbox)
declare -A coffer pkcs7
for r in L01_tp_production_getpure_2024 L11_rc_sandbox_revenuecat_sample1_2020 L03_tp_sandbox_nutcall_187iap_2020; do
    echo "legacy $r …" >&2
    coffer[$r]=$("$BIN" bench verify "$F/legacy/$r.der" "${ENVS[@]}" --seconds "$S" | rate)
    created=$("$BIN" receipt inspect "$F/legacy/$r.der" "${ENVS[@]}" --json | awk -F'"' '/"creationDate"/ && !done {print $4; done=1}')
    pkcs7[$r]=$("$OUT/pkcs7_verify" "$F/legacy/$r.der" "$F/certs/AppleIncRootCertificate.cer" "$(epoch "$created")" "$S" | awk -F': ' '{sub("/s","",$2); print $2}')
done
echo "sandbox receipt (2 records) …" >&2
rm -rf "$OUT/sandbox"
"$BIN" sandbox init --dir "$OUT/sandbox" >/dev/null
"$BIN" sandbox receipt --dir "$OUT/sandbox" --bundle-id com.coffer.bench --purchase level.1:1 --purchase level.2:2 --out "$OUT/small.der"
small=$("$BIN" bench verify "$OUT/small.der" --root "$OUT/sandbox/root.cer" --environment LocalTesting --seconds "$S" | rate)
small_pkcs7=$("$OUT/pkcs7_verify" "$OUT/small.der" "$OUT/sandbox/root.cer" "$(date -u +%s)" "$S" | awk -F': ' '{sub("/s","",$2); print $2}')
echo "jws …" >&2
j02=$("$BIN" bench verify "$F/jws/J02_real_sandbox_transaction_consumable_goodheart_2025_mingos.jws" "${ENVS[@]}" --seconds "$S" | rate)
j10=$("$BIN" bench verify "$F/jws/J10_real_sandbox_notification_DID_RENEW_1759302518835_session.jws" "${ENVS[@]}" --seconds "$S" | rate)

echo "tokens …" >&2
tokens=$("$BIN" bench tokens --seconds "$S")
mint=$(awk -F': ' '/^token mint: /{sub("/s","",$2); print $2}' <<<"$tokens")
tverify=$(awk -F': ' '/^token verify: /{sub("/s","",$2); print $2}' <<<"$tokens")
echo "Apple's Python library (app-store-server-library) …" >&2
PYENV=.build-release/asslib
if [ ! -x "$PYENV/bin/python" ]; then
    python3 -m venv "$PYENV" >&2 && "$PYENV/bin/pip" install -q app-store-server-library >&2 || true
fi
python_j02=$("$PYENV/bin/python" Benchmarks/python_jws_verify.py "$F/jws/J02_real_sandbox_transaction_consumable_goodheart_2025_mingos.jws" \
    "$F/certs/AppleRootCA-G3.cer" "$S" 2>/dev/null | rate || echo 0)

ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
printf '\nreference points: openssl rsa2048 verify %s/s, ecdsap256 verify %s/s\n\n' "$rsa" "$ecdsa"
printf '| input | coffer /s | vs RSA-2048 verify | vs PKCS7_verify (same bytes) |\n|---|---|---|---|\n'
printf '| sandbox receipt, 2 records, SHA-256 | %s | %s | %s× (%s/s) |\n' "$small" "$(ratio "$small" "$rsa")" "$(ratio "$small" "$small_pkcs7")" "$small_pkcs7"
for r in L01_tp_production_getpure_2024 L11_rc_sandbox_revenuecat_sample1_2020 L03_tp_sandbox_nutcall_187iap_2020; do
    printf '| %s | %s | %s | %s× (%s/s) |\n' "$r" "${coffer[$r]}" "$(ratio "${coffer[$r]}" "$rsa")" "$(ratio "${coffer[$r]}" "${pkcs7[$r]}")" "${pkcs7[$r]}"
done
printf '\n| input | coffer /s | vs P-256 verify |\n|---|---|---|\n'
printf '| J02 transaction (1 signature) | %s | %s |\n' "$j02" "$(ratio "$j02" "$ecdsa")"
printf '| J10 notification (3 signatures) | %s | %s (×3 = %s) |\n' "$j10" "$(ratio "$j10" "$ecdsa")" "$(ratio "$((j10 * 3))" "$ecdsa")"
printf '| J02, Apple app-store-server-library (Python) | %s | %s (Coffer is %s×) |\n' "$python_j02" "$(ratio "$python_j02" "$ecdsa")" "$(ratio "$j02" "$python_j02")"
printf '\n| tokens (HMAC-SHA256) | /s | vs openssl HMAC-SHA256 of 256 bytes (%s/s) |\n|---|---|---|\n' "$hmac"
printf '| mint | %s | %s |\n| verify | %s | %s |\n' "$mint" "$(ratio "$mint" "$hmac")" "$tverify" "$(ratio "$tverify" "$hmac")"
