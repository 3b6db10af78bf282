"""Apple's official Python library (app-store-server-library on PyPI) verifying the same JWS
as `coffer bench verify`, for the side-by-side table. One core, offline (no OCSP), chain
checked against Apple Root CA - G3 like Coffer.

    python3 Benchmarks/python_jws_verify.py JWS_FILE ROOT_CER SECONDS
Prints `verify: N/s` as its last line.
"""
import sys
import time

from appstoreserverlibrary.models.Environment import Environment
from appstoreserverlibrary.signed_data_verifier import SignedDataVerifier

jws_path, root_path, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
jws = open(jws_path).read().strip()
root = open(root_path, "rb").read()
verifier = SignedDataVerifier([root], False, Environment.SANDBOX, "com.goodheartapp")
transaction = verifier.verify_and_decode_signed_transaction(jws)  # raises if not valid
count = 0
start = time.perf_counter()
deadline = start + seconds
while time.perf_counter() < deadline:
    verifier.verify_and_decode_signed_transaction(jws)
    count += 1
elapsed = time.perf_counter() - start
print(f"transaction: {transaction.transactionId}")
print(f"verify: {count / elapsed:.0f}/s")
