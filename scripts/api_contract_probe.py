#!/usr/bin/env python3
"""Drives a live `coffer serve --demo` through the paths schemathesis cannot reach on its own
(a real redemption, its grant and downloads, refunds and reinstatements, uploads, products,
revocations, checkpoints, exports) and checks every answer against docs/openapi.yaml: the
status is documented for the operation, the Content-Type is one documented for it, and a JSON
body validates against the documented schema. NDJSON exports are validated line by line against
the item schemas of the paged endpoints.

Each step also states the status the README promises, so a server that answers a documented
but wrong status fails too.

Usage (the .build-venv python, which has PyYAML, requests and jsonschema_rs):
  scripts/api_contract_probe.py --url http://127.0.0.1:PORT --admin-key K --auditor-key K \
      --coffer .build/debug/coffer --sandbox DATA/sandbox [--spec docs/openapi.yaml]
Exit 0 when every check held.
"""
import argparse
import base64
import copy
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid

import jsonschema_rs
import requests
import yaml

BUNDLE = "com.coffer.demo"


class Spec:
    def __init__(self, path):
        self.doc = yaml.safe_load(open(path, encoding="utf-8"))
        self.routes = []
        for template, item in self.doc["paths"].items():
            pattern = "^" + re.sub(r"\\\{(\w+)\\\}", r"[^/]+", re.escape(template)) + "$"
            literal = "{" not in template
            self.routes.append((not literal, re.compile(pattern), template, item))
        self.routes.sort(key=lambda r: r[0])  # literal paths first

    def deref(self, node, depth=0):
        if depth > 64:
            raise RuntimeError("$ref nesting too deep")
        if isinstance(node, dict):
            if "$ref" in node:
                target = self.doc
                for part in node["$ref"][2:].split("/"):
                    target = target[part]
                merged = dict(self.deref(target, depth + 1))
                for k, v in node.items():
                    if k != "$ref":
                        merged[k] = self.deref(v, depth + 1)
                return merged
            return {k: self.deref(v, depth + 1) for k, v in node.items()}
        if isinstance(node, list):
            return [self.deref(v, depth + 1) for v in node]
        return node

    def operation(self, method, path):
        for _, pattern, template, item in self.routes:
            if pattern.match(path) and method.lower() in item:
                return template, item[method.lower()]
        return None, None

    def schema(self, name):
        return self.deref({"$ref": f"#/components/schemas/{name}"})


def media(value):
    return (value or "").split(";")[0].strip().lower()


def media_matches(documented, received):
    d_main, _, d_sub = documented.partition("/")
    r_main, _, r_sub = received.partition("/")
    return d_main in ("*", r_main) and d_sub in ("*", r_sub)


def is_json(value):
    m = media(value)
    return m == "application/json" or (m.startswith("application/") and m.endswith("+json"))


def validator(schema):
    schema = copy.deepcopy(schema)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return jsonschema_rs.validator_for(schema, validate_formats=True)


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def player_token(signing_key, sub, issuer, audience, ttl=600, alg="EdDSA"):
    """A player token (JWT) signed with the Ed25519 key `signing_key` (PEM), by openssl."""
    header = b64url(json.dumps({"alg": alg, "typ": "JWT"}).encode())
    now = int(time.time())
    payload = b64url(json.dumps({"sub": sub, "iss": issuer, "aud": audience, "exp": now + ttl, "iat": now}).encode())
    signing_input = f"{header}.{payload}".encode()
    # Ed25519 signs the message itself (no digest), so openssl needs it as a file, not a pipe.
    with tempfile.NamedTemporaryFile() as message:
        message.write(signing_input)
        message.flush()
        signature = subprocess.run(["openssl", "pkeyutl", "-sign", "-inkey", signing_key, "-rawin", "-in", message.name],
                                   capture_output=True, check=True).stdout
    return f"{header}.{payload}.{b64url(signature)}"


class Probe:
    def __init__(self, args):
        self.args = args
        self.spec = Spec(args.spec)
        self.base = args.url.rstrip("/")
        self.http = requests.Session()
        self.passed = 0
        self.failures = []

    # -- checking -------------------------------------------------------------------------------

    def fail(self, label, message):
        self.failures.append(f"{label}: {message}")
        print(f"  FAIL {label}: {message}")

    def check(self, label, method, path, response, expect=None):
        """`response` conforms to the spec; its status is `expect` (an int or a set) when given."""
        ok = True
        template, op = self.spec.operation(method, path.split("?")[0])
        status = response.status_code
        if op is None:
            self.fail(label, f"{method} {path} is no documented operation")
            return response
        if expect is not None and status not in (expect if isinstance(expect, (set, tuple, list)) else {expect}):
            ok = False
            self.fail(label, f"{method} {template}: expected {expect}, got {status}: {response.text[:300]}")
        responses = op.get("responses", {})
        definition = responses.get(str(status)) or responses.get(f"{str(status)[0]}XX") or responses.get("default")
        if definition is None:
            self.fail(label, f"{method} {template}: status {status} is not documented: {response.text[:300]}")
            return response
        definition = self.spec.deref(definition)
        content = definition.get("content", {})
        received = media(response.headers.get("Content-Type"))
        if not content:
            if method != "HEAD" and response.content:
                ok = False
                self.fail(label, f"{method} {template} {status}: documented without a body, got {len(response.content)} bytes")
        elif method != "HEAD":
            if not received:
                ok = False
                self.fail(label, f"{method} {template} {status}: no Content-Type (documented: {list(content)})")
            else:
                matching = [m for m in content if media_matches(m.lower(), received)]
                if not matching:
                    ok = False
                    self.fail(label, f"{method} {template} {status}: Content-Type {received} not in {list(content)}")
                elif is_json(received) and content[matching[0]].get("schema") is not None:
                    schema = content[matching[0]].get("schema")
                    try:
                        body = response.json()
                    except ValueError as e:
                        ok = False
                        self.fail(label, f"{method} {template} {status}: not JSON: {e}")
                        body = None
                    if schema is not None and body is not None:
                        errors = list(validator(schema).iter_errors(body))
                        for e in errors[:5]:
                            ok = False
                            self.fail(label, f"{method} {template} {status}: {e.message} at {list(e.instance_path)}")
        for name, header in definition.get("headers", {}).items():
            header = self.spec.deref(header)
            if header.get("required") and name.lower() not in {k.lower() for k in response.headers}:
                if not (name.lower() == "content-length" and method == "HEAD"):
                    ok = False
                    self.fail(label, f"{method} {template} {status}: required header {name} missing")
        if ok:
            self.passed += 1
        return response

    def lines(self, label, response, schema_name):
        """Every NDJSON line of `response` validates against `schema_name`."""
        v = validator(self.spec.schema(schema_name))
        count = 0
        for n, line in enumerate(response.text.splitlines(), 1):
            if not line.strip():
                continue
            count += 1
            try:
                item = json.loads(line)
            except ValueError as e:
                self.fail(label, f"line {n} is not JSON: {e}")
                continue
            for e in list(v.iter_errors(item))[:3]:
                self.fail(label, f"line {n}: {e.message} at {list(e.instance_path)}")
        return count

    # -- requests -------------------------------------------------------------------------------

    def request(self, method, path, key=None, **kwargs):
        headers = dict(kwargs.pop("headers", {}) or {})
        base = kwargs.pop("base", self.base)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return self.http.request(method, base + path, headers=headers, timeout=30, allow_redirects=False, **kwargs)

    def call(self, label, method, path, expect=None, key=None, **kwargs):
        return self.check(label, method, path, self.request(method, path, key=key, **kwargs), expect)

    def items(self, path, **kwargs):
        """The `items` of a 200 JSON page at `path` (unchecked: for polling), else []."""
        r = self.request("GET", path, **kwargs)
        try:
            body = r.json() if r.status_code == 200 else {}
        except ValueError:
            return []
        return (body.get("items") or []) if isinstance(body, dict) else []

    @staticmethod
    def poll(condition, seconds, interval=0.25):
        """Whether `condition()` held within `seconds`, asked every `interval` s: a bounded wait, not a guessed sleep."""
        deadline = time.monotonic() + seconds
        while not condition():
            if time.monotonic() >= deadline:
                return False
            time.sleep(interval)
        return True

    def coffer(self, *args):
        return subprocess.run([self.args.coffer, *args], check=True, capture_output=True, text=True).stdout.strip()

    def receipt(self, product, transaction):
        return self.coffer("sandbox", "receipt", "--dir", self.args.sandbox, "--bundle-id", BUNDLE, "--purchase", f"{product}:{transaction}", "--base64")

    def notification(self, *args):
        return self.coffer("sandbox", "notification", "--dir", self.args.sandbox, "--bundle-id", BUNDLE, *args)

    # -- the walk -------------------------------------------------------------------------------

    def run(self):
        admin, auditor = self.args.admin_key, self.args.auditor_key
        print("api-contract probe: operations")
        self.call("liveness", "GET", "/healthz", 200)
        self.call("readiness", "GET", "/readyz", 200)
        self.call("metrics", "GET", "/metrics", 200)
        page = self.call("console page", "GET", "/console", 200)
        if page.headers.get("ETag"):
            self.call("console page not modified", "GET", "/console", 304, headers={"If-None-Match": page.headers["ETag"]})
        self.call("console index file", "GET", "/console/index.html", 200)
        self.call("console unknown file", "GET", "/console/no-such-file.js", 404)
        self.call("non-canonical path", "GET", "/console/a%2Fb", 400)

        print("api-contract probe: keys")
        self.call("admin route without a key", "GET", "/v1/admin/products", 401)
        self.call("admin route with an auditor key", "GET", "/v1/admin/products", 403, key=auditor)
        self.call("audit route with an auditor key", "GET", "/v1/audit/public-key", 200, key=auditor)
        self.call("audit route with an admin key", "GET", "/v1/audit/public-key", 200, key=admin)
        me = self.call("who am I, admin", "GET", "/v1/whoami", 200, key=admin)
        if me.status_code == 200 and me.json().get("role") != "admin":
            self.fail("who am I, admin", f"role {me.json().get('role')}")
        me = self.call("who am I, auditor", "GET", "/v1/whoami", 200, key=auditor)
        if me.status_code == 200 and me.json().get("role") != "auditor":
            self.fail("who am I, auditor", f"role {me.json().get('role')}")
        self.call("who am I, nobody", "GET", "/v1/whoami", 401)
        self.call("who am I, a wrong key", "GET", "/v1/whoami", 401, key="cof_admin_not-a-key")

        print("api-contract probe: redemption, grant, downloads")
        receipt = self.receipt("com.coffer.demo.levelpack2", "2000")
        redeemed = self.call("redeem a receipt", "POST", "/v1/redemptions", 201, json={"receipt": receipt})
        self.call("replay it", "POST", "/v1/redemptions", 409, json={"receipt": receipt})
        self.call("redeem nothing", "POST", "/v1/redemptions", 400, json={})
        self.call("redeem both proofs", "POST", "/v1/redemptions", 400, json={"receipt": receipt, "signedTransaction": "a.b.c"})
        self.call("redeem a bad appAccountToken", "POST", "/v1/redemptions", 400, json={"receipt": receipt, "appAccountToken": "nope"})
        self.call("redeem a receipt that is no receipt", "POST", "/v1/redemptions", {400, 422},
                  json={"receipt": base64.b64encode(b"not a receipt").decode()})
        self.call("redeem a JWS that is no JWS", "POST", "/v1/redemptions", {400, 422}, json={"signedTransaction": "a.b.c"})
        season = self.coffer("sandbox", "transaction", "--dir", self.args.sandbox, "--bundle-id", BUNDLE, "--product", "com.coffer.demo.season1",
                             "--product-type", "autoRenewable", "--transaction-id", "7000", "--expires-in", "3600")
        self.call("redeem a season pass", "POST", "/v1/redemptions", 201, json={"signedTransaction": season})
        lapsed = self.coffer("sandbox", "transaction", "--dir", self.args.sandbox, "--bundle-id", BUNDLE, "--product", "com.coffer.demo.season1",
                             "--product-type", "autoRenewable", "--transaction-id", "7100", "--expires-in=-60")
        self.call("redeem a lapsed season pass", "POST", "/v1/redemptions", 422, json={"signedTransaction": lapsed})
        wrong_type = self.coffer("sandbox", "transaction", "--dir", self.args.sandbox, "--bundle-id", BUNDLE, "--product",
                                 "com.coffer.demo.levelpack1", "--product-type", "consumable", "--transaction-id", "7200")
        self.call("redeem the wrong product type", "POST", "/v1/redemptions", 422, json={"signedTransaction": wrong_type})
        unknown = self.receipt("com.coffer.demo.nothing", "7300")
        self.call("redeem an unknown product", "POST", "/v1/redemptions", 404, json={"receipt": unknown})
        grant, url = None, None
        if redeemed.status_code == 201:
            body = redeemed.json()
            grant = body.get("grant")
            url = body["assets"][0]["url"] if body.get("assets") else None
        if grant:
            fresh = self.call("exchange the grant", "POST", "/v1/grants/tokens", 200, json={"grant": grant})
            if fresh.status_code == 200 and fresh.json().get("assets"):
                url = fresh.json()["assets"][0]["url"]
        self.call("exchange an unknown grant", "POST", "/v1/grants/tokens", 403, json={"grant": "x" * 43})
        self.call("exchange nothing", "POST", "/v1/grants/tokens", 400, json={})
        if url:
            whole = self.call("download", "GET", url, 200)
            size = len(whole.content)
            if whole.status_code == 200 and whole.headers.get("ETag") != '"%s"' % hashlib.sha256(whole.content).hexdigest():
                self.fail("download", f"ETag {whole.headers.get('ETag')} is not the body's SHA-256")
            self.call("download a range", "GET", url, 206, headers={"Range": "bytes=0-9"})
            self.call("download a suffix range", "GET", url, 206, headers={"Range": "bytes=-5"})
            self.call("download a range past the end", "GET", url, 416, headers={"Range": f"bytes={size + 10}-"})
            self.call("download two ranges (ignored)", "GET", url, 200, headers={"Range": "bytes=0-1,3-4"})
            self.call("HEAD a download", "HEAD", url, 200)
            self.call("HEAD a range", "HEAD", url, 206, headers={"Range": "bytes=1-2"})
        else:
            self.fail("download", "no download URL from the redemption")
        self.call("download with a forged token", "GET", "/v1/downloads/v1.k1.AAAA.BBBB", 403)
        self.call("download with garbage", "GET", "/v1/downloads/garbage", 403)
        self.call("download with a long token", "GET", "/v1/downloads/" + "v1." + "A" * 600, 403)
        self.call("entitlements without player identity", "GET", "/v1/entitlements", 404)

        print("api-contract probe: notifications")
        refund = self.notification("--type", "REFUND", "--product", "com.coffer.demo.levelpack2", "--transaction-id", "2000")
        self.call("REFUND a redeemed purchase", "POST", "/v1/notifications", 200, json={"signedPayload": refund})
        self.call("Apple retries the REFUND", "POST", "/v1/notifications", 200, json={"signedPayload": refund})
        if grant:
            self.call("the refunded purchase's grant", "POST", "/v1/grants/tokens", 403, json={"grant": grant})
        reversed_ = self.notification("--type", "REFUND_REVERSED", "--product", "com.coffer.demo.levelpack2", "--transaction-id", "2000")
        self.call("REFUND_REVERSED", "POST", "/v1/notifications", 200, json={"signedPayload": reversed_})
        declined = self.notification("--type", "REFUND_DECLINED", "--product", "com.coffer.demo.levelpack2", "--transaction-id", "2000")
        self.call("REFUND_DECLINED", "POST", "/v1/notifications", 200, json={"signedPayload": declined})
        early = self.notification("--type", "REFUND", "--product", "com.coffer.demo.levelpack1", "--transaction-id", "8000")
        self.call("REFUND before the redemption", "POST", "/v1/notifications", 200, json={"signedPayload": early})
        self.call("redeem what was refunded first", "POST", "/v1/redemptions", 410, json={"receipt": self.receipt("com.coffer.demo.levelpack1", "8000")})
        grace = self.notification("--type", "DID_FAIL_TO_RENEW", "--subtype", "GRACE_PERIOD", "--product", "com.coffer.demo.season1",
                                  "--product-type", "autoRenewable", "--transaction-id", "7000", "--expires-in", "60", "--grace-period-in", "86400")
        self.call("DID_FAIL_TO_RENEW", "POST", "/v1/notifications", 200, json={"signedPayload": grace})
        ignored = self.notification("--type", "CONSUMPTION_REQUEST", "--product", "com.coffer.demo.levelpack2", "--transaction-id", "2000")
        self.call("a type Coffer ignores", "POST", "/v1/notifications", 200, json={"signedPayload": ignored})
        self.call("a notification that is no JWS", "POST", "/v1/notifications", {400, 422}, json={"signedPayload": "a.b.c"})
        self.call("a notification without a payload", "POST", "/v1/notifications", 400, json={})

        print("api-contract probe: admin")
        data = b"coffer api contract probe\n"
        digest = "sha-256=:" + base64.b64encode(hashlib.sha256(data).digest()).decode() + ":"
        self.call("upload an asset", "PUT", "/v1/admin/assets/probe-asset?name=probe.txt", 201, key=admin, data=data,
                  headers={"Content-Type": "text/plain", "Content-Digest": digest})
        self.call("upload without a type", "PUT", "/v1/admin/assets/probe-asset", 201, key=admin, data=data)
        self.call("upload with a wrong digest", "PUT", "/v1/admin/assets/probe-asset", 400, key=admin, data=b"other",
                  headers={"Content-Digest": digest})
        self.call("upload with a malformed digest", "PUT", "/v1/admin/assets/probe-asset", 400, key=admin, data=data,
                  headers={"Content-Digest": "md5=:x:"})
        self.call("upload with a bad id", "PUT", "/v1/admin/assets/bad!id", 400, key=admin, data=data)
        self.call("upload with a bad name", "PUT", "/v1/admin/assets/probe-asset?name=a/b", 400, key=admin, data=data)
        self.call("upload an empty asset", "PUT", "/v1/admin/assets/probe-empty", 201, key=admin, data=b"")
        self.call("get an asset", "GET", "/v1/admin/assets/probe-asset", 200, key=admin)
        self.call("get an unknown asset", "GET", "/v1/admin/assets/no-such-asset", 404, key=admin)
        versions = self.call("an asset's versions", "GET", "/v1/admin/assets/probe-asset/versions", 200, key=admin)
        if versions.status_code == 200 and [v["version"] for v in versions.json()] != [2, 1]:
            self.fail("an asset's versions", f"expected versions 2 and 1, newest first: {versions.text[:300]}")
        self.call("an unknown asset's versions", "GET", "/v1/admin/assets/no-such-asset/versions", 404, key=admin)
        self.call("list assets", "GET", "/v1/admin/assets", 200, key=admin)
        product = {"bundleId": BUNDLE, "type": "nonRenewing", "durationSeconds": 3600, "assetIds": ["probe-asset", "probe-empty"],
                   "title": "Probe pass", "familyShareable": True}
        self.call("put a product", "PUT", "/v1/admin/products/com.coffer.demo.probe", 200, key=admin, json=product)
        self.call("put a product without its duration", "PUT", "/v1/admin/products/com.coffer.demo.probe", 400, key=admin,
                  json={**product, "durationSeconds": None})
        self.call("put a product of an unknown asset", "PUT", "/v1/admin/products/com.coffer.demo.probe", 422, key=admin,
                  json={**product, "assetIds": ["no-such-asset"]})
        self.call("put a product of another app", "PUT", "/v1/admin/products/com.coffer.demo.probe", 422, key=admin,
                  json={**product, "bundleId": "com.example.other"})
        self.call("put a product with a bad id", "PUT", "/v1/admin/products/bad!id", 400, key=admin, json=product)
        self.call("list products", "GET", "/v1/admin/products", 200, key=admin)
        pass_ = self.receipt("com.coffer.demo.probe", "9000")
        bought = self.call("redeem the new product", "POST", "/v1/redemptions", 201, json={"receipt": pass_})
        if bought.status_code == 201:
            for asset in bought.json().get("assets", []):
                self.call(f"download {asset['assetId']}", "GET", asset["url"], 200)
        self.call("delete a product", "DELETE", "/v1/admin/products/com.coffer.demo.probe", 204, key=admin)
        self.call("delete it again", "DELETE", "/v1/admin/products/com.coffer.demo.probe", 404, key=admin)
        self.call("redeem a purchase to revoke", "POST", "/v1/redemptions", 201, json={"receipt": self.receipt("com.coffer.demo.levelpack1", "2100")})
        self.call("revoke a redemption", "POST", "/v1/admin/revocations", 201, key=admin, json={"transactionId": "2100", "reason": "api contract"})
        self.call("revoke it again", "POST", "/v1/admin/revocations", 409, key=admin, json={"transactionId": "2100", "reason": "again"})
        self.call("revoke what was never redeemed", "POST", "/v1/admin/revocations", 404, key=admin,
                  json={"transactionId": "no-such-transaction", "reason": "x", "environment": "LocalTesting"})
        self.call("revoke with a bad environment", "POST", "/v1/admin/revocations", 400, key=admin,
                  json={"transactionId": "2100", "reason": "x", "environment": "Moon"})
        self.call("the admin log", "GET", "/v1/admin/audit-log", 200, key=admin)
        self.call("a page of the admin log", "GET", "/v1/admin/audit-log?limit=1&cursor=1", 200, key=admin)
        self.call("the admin log with a bad limit", "GET", "/v1/admin/audit-log?limit=0", 400, key=admin)

        print("api-contract probe: audit")
        # Delivery evidence is written once a second, a checkpoint every second: wait until both are
        # there (30 s at most, shared); the loop below fails on whichever is still empty.
        deadline = time.monotonic() + 30
        for path in ("deliveries", "checkpoints"):
            has_items = lambda: bool(self.items(f"/v1/audit/{path}", key=auditor))
            self.poll(has_items, max(0.0, deadline - time.monotonic()))
        for path in ("redemptions", "attempts", "revocations", "events", "deliveries", "checkpoints"):
            first = self.call(f"audit {path}", "GET", f"/v1/audit/{path}", 200, key=auditor)
            if first.status_code == 200 and not first.json().get("items"):
                self.fail(f"audit {path}", "no items: the probe should have made some")
            paged = self.call(f"audit {path}, one a page", "GET", f"/v1/audit/{path}?limit=1", 200, key=auditor)
            if paged.status_code == 200 and paged.json().get("nextCursor"):
                self.call(f"audit {path}, next page", "GET", f"/v1/audit/{path}?limit=1&cursor={paged.json()['nextCursor']}", 200, key=auditor)
            self.call(f"audit {path} with a bad cursor", "GET", f"/v1/audit/{path}?cursor=-1", 400, key=auditor)
        self.call("audit redemptions, filtered", "GET",
                  "/v1/audit/redemptions?productId=com.coffer.demo.levelpack2&from=2000-01-01T00:00:00Z&to=2999-01-01T00:00:00%2B01:00", 200, key=auditor)
        self.call("audit attempts by code", "GET", "/v1/audit/attempts?code=alreadyRedeemed", 200, key=auditor)
        self.call("audit with a bad date", "GET", "/v1/audit/attempts?from=yesterday", 400, key=auditor)
        self.call("the latest checkpoint", "GET", "/v1/audit/checkpoints/latest", 200, key=auditor)
        self.call("the public key", "GET", "/v1/audit/public-key", 200, key=auditor)
        for kind, schema in (("redemptions", "Redemption"), ("attempts", "RejectedAttempt"), ("deliveries", "Delivery")):
            r = self.call(f"export {kind}", "GET", f"/v1/audit/export?kind={kind}", 200, key=auditor)
            if r.status_code == 200 and self.lines(f"export {kind}", r, schema) == 0:
                self.fail(f"export {kind}", "no lines")
            self.call(f"export {kind} as CSV", "GET", f"/v1/audit/export?kind={kind}&format=csv", 200, key=auditor)
        ledger = self.call("export the ledger", "GET", "/v1/audit/export?kind=ledger", 200, key=auditor)
        if ledger.status_code == 200:
            first = json.loads(ledger.text.splitlines()[0])
            if first.get("format") != "coffer-ledger-export-v1":
                self.fail("export the ledger", f"header is {first}")
        self.call("export the ledger as CSV", "GET", "/v1/audit/export?kind=ledger&format=csv", 400, key=auditor)
        self.call("export an unknown kind", "GET", "/v1/audit/export?kind=keys", 400, key=auditor)

        if self.args.players_url:
            self.players()

        total = self.passed + len(self.failures)
        if self.failures:
            print(f"api-contract probe: FAILED, {len(self.failures)} of {total} checks")
            return 1
        print(f"api-contract probe: OK, {total} checks")
        return 0


    def players(self):
        """Player identity on: tokens, binding, restore, renewal, entitlements."""
        print("api-contract probe: players")
        a = self.args
        base, sandbox = a.players_url.rstrip("/"), a.players_sandbox
        alice, bob = str(uuid.uuid4()), str(uuid.uuid4())
        token = lambda sub, **kw: player_token(a.player_signing_key, sub, kw.pop("iss", a.player_issuer), kw.pop("aud", a.player_audience), **kw)
        ta, tb = token(alice), token(bob)

        def call(label, method, path, expect, bearer=None, **kwargs):
            headers = dict(kwargs.pop("headers", {}) or {})
            if bearer is not None:
                headers["Authorization"] = f"Bearer {bearer}"
            return self.check(label, method, path, self.request(method, path, base=base, headers=headers, **kwargs), expect)

        def receipt(product, transaction):
            return self.coffer("sandbox", "receipt", "--dir", sandbox, "--bundle-id", BUNDLE, "--purchase", f"{product}:{transaction}", "--base64")

        def season(transaction, original=None, account=None, expires="3600"):
            extra = ["--original-transaction-id", original] if original else []
            extra += ["--app-account-token", account] if account else []
            return self.coffer("sandbox", "transaction", "--dir", sandbox, "--bundle-id", BUNDLE, "--product", "com.coffer.demo.season1",
                               "--product-type", "autoRenewable", "--transaction-id", transaction, f"--expires-in={expires}", *extra)

        call("entitlements without a token", "GET", "/v1/entitlements", 401)
        call("entitlements with garbage", "GET", "/v1/entitlements", 401, bearer="not.a.jwt")
        call("entitlements with alg none", "GET", "/v1/entitlements", 401,
             bearer=b64url(b'{"alg":"none"}') + "." + b64url(json.dumps({"sub": alice}).encode()) + ".")
        call("entitlements for another audience", "GET", "/v1/entitlements", 403, bearer=token(alice, aud="another-game"))
        call("entitlements for another issuer", "GET", "/v1/entitlements", 403, bearer=token(alice, iss="https://evil.invalid"))
        call("entitlements, none yet", "GET", "/v1/entitlements", 200, bearer=ta)
        call("entitlements with a bad cursor", "GET", "/v1/entitlements?cursor=x", 400, bearer=ta)
        r = receipt("com.coffer.demo.levelpack1", "3000")
        call("redeem without a token", "POST", "/v1/redemptions", 401, json={"receipt": r})
        call("redeem with an expired token", "POST", "/v1/redemptions", 401, bearer=token(alice, ttl=-3600), json={"receipt": r})
        call("redeem as alice", "POST", "/v1/redemptions", 201, bearer=ta, json={"receipt": r})
        call("alice restores it", "POST", "/v1/redemptions", 200, bearer=ta, json={"receipt": r})
        call("bob presents alice's purchase", "POST", "/v1/redemptions", 409, bearer=tb, json={"receipt": r})
        call("a season pass bound to alice", "POST", "/v1/redemptions", 201, bearer=ta, json={"signedTransaction": season("3100", account=alice)})
        call("its renewal", "POST", "/v1/redemptions", 200, bearer=ta, json={"signedTransaction": season("3101", original="3100", account=alice, expires="7200")})
        call("a season pass for bob's account, by alice", "POST", "/v1/redemptions", 422, bearer=ta,
             json={"signedTransaction": season("3200", account=bob)})
        # 15 s to redeem it however slow the machine; then wait (bounded) until bob's entitlements
        # show it lapsed, rather than sleeping past its end.
        short = season("3300", account=bob, expires="15")
        call("a season pass about to lapse", "POST", "/v1/redemptions", 201, bearer=tb, json={"signedTransaction": short})
        lapsed = lambda: any(i.get("transactionId") == "3300" and i.get("state") == "expired"
                             for i in self.items("/v1/entitlements", base=base, headers={"Authorization": f"Bearer {tb}"}))
        if not self.poll(lapsed, 60, interval=0.5):
            self.fail("the season pass lapses", "bob's entitlements did not show transaction 3300 expired within 60 s")
        call("restoring the lapsed pass", "POST", "/v1/redemptions", 403, bearer=tb, json={"signedTransaction": short})
        listed = call("alice's entitlements", "GET", "/v1/entitlements", 200, bearer=ta)
        if listed.status_code == 200 and len(listed.json().get("items", [])) != 2:
            self.fail("alice's entitlements", f"expected the level pack and the season pass, got {listed.text[:300]}")
        call("bob's entitlements (one lapsed)", "GET", "/v1/entitlements?cursor=0", 200, bearer=tb)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--url", required=True)
    parser.add_argument("--admin-key", required=True)
    parser.add_argument("--auditor-key", required=True)
    parser.add_argument("--coffer", required=True)
    parser.add_argument("--sandbox", required=True)
    parser.add_argument("--spec", default=os.path.join(root, "docs", "openapi.yaml"))
    parser.add_argument("--players-url", help="a second demo server with player identity on (--player-key, issuer, audience below)")
    parser.add_argument("--players-sandbox", help="that server's sandbox CA directory")
    parser.add_argument("--player-signing-key", help="the Ed25519 private key (PEM) whose public key that server was given")
    parser.add_argument("--player-issuer", default="https://login.coffer.invalid")
    parser.add_argument("--player-audience", default="coffer-api-contract")
    parser.add_argument("--print-player-token", action="store_true", help="print a player token valid for an hour and exit")
    args = parser.parse_args()
    if args.print_player_token:
        print(player_token(args.player_signing_key, str(uuid.uuid4()), args.player_issuer, args.player_audience, ttl=3600))
        return 0
    return Probe(args).run()


if __name__ == "__main__":
    sys.exit(main())
