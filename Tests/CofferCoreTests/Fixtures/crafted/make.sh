#!/bin/sh
# Crafted legacy receipts (PKCS#7 signed data) that attack the chain building, made with
# OpenSSL 3. Not Apple's: they must be refused before any costly work. Run from this folder;
# `payload.der` is a minimal receipt payload (environment Production, bundle id
# com.example.game, a creation date) that every receipt here signs.
set -eu
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
days=3650

# issuer-maze.der: seven CA certificates with the same subject and issuer (CN=S), the same
# key and different subjectAltNames, and a leaf issued by CN=S. Each of the seven can issue
# each other: a path builder that tries every candidate issuer tries every ordering of
# them (13,699 signature checks, never reaching a trusted root).
openssl genrsa -out "$work/K.pem" 2048 2>/dev/null
openssl genrsa -out "$work/L.pem" 2048 2>/dev/null
: > "$work/ints.pem"
for i in 1 2 3 4 5 6 7; do
  openssl req -x509 -new -key "$work/K.pem" -subj /CN=S -days $days -set_serial $i \
    -addext "subjectAltName=DNS:i$i.example" -addext "basicConstraints=critical,CA:TRUE" \
    -out "$work/int$i.pem"
  cat "$work/int$i.pem" >> "$work/ints.pem"
done
openssl req -new -key "$work/L.pem" -subj /CN=leaf -out "$work/leaf.csr"
printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n' > "$work/leaf.ext"
openssl x509 -req -in "$work/leaf.csr" -CA "$work/int1.pem" -CAkey "$work/K.pem" -set_serial 100 -days $days \
  -extfile "$work/leaf.ext" -out "$work/leaf.pem" 2>/dev/null
openssl cms -sign -nodetach -binary -noattr -md sha256 -in payload.der -signer "$work/leaf.pem" -inkey "$work/L.pem" \
  -certfile "$work/ints.pem" -outform DER -out issuer-maze.der
# issuer-maze-4.der: the same leaf with four of the seven (a receipt may carry at most five
# certificates: the eight above are refused by their count before any is parsed). The one in
# the repository was cut from issuer-maze.der (the certificates lie outside the signed bytes).
sed -n '/BEGIN/,/END/p' "$work/int1.pem" "$work/int2.pem" "$work/int3.pem" "$work/int4.pem" > "$work/ints4.pem"
openssl cms -sign -nodetach -binary -noattr -md sha256 -in payload.der -signer "$work/leaf.pem" -inkey "$work/L.pem" \
  -certfile "$work/ints4.pem" -outform DER -out issuer-maze-4.der

# rsa8192-signer.der: a receipt signed by a self-issued leaf with an 8192-bit RSA key (one
# verification costs ~16 times one of Apple's 2048-bit keys).
openssl genrsa -out "$work/B.pem" 8192 2>/dev/null
openssl req -x509 -new -key "$work/B.pem" -subj /CN=big -days $days -set_serial 7 \
  -addext "basicConstraints=critical,CA:FALSE" -addext "keyUsage=digitalSignature" -out "$work/big.pem"
openssl cms -sign -nodetach -binary -noattr -md sha256 -in payload.der -signer "$work/big.pem" -inkey "$work/B.pem" \
  -outform DER -out rsa8192-signer.der
# rsa8192-cert.der: that certificate alone — as a root an operator configures, its size is theirs.
openssl x509 -in "$work/big.pem" -outform DER -out rsa8192-cert.der
