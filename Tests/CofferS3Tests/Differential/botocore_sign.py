"""Signs requests with botocore's own S3 signers, for SigV4DifferentialTests.

Reads a JSON list of requests from the file named by argv[1]; writes a JSON list of results
to stdout, one per request: the Authorization header (S3SigV4Auth) or, for a presigned
request, the query string (S3SigV4QueryAuth). botocore's clock is replaced by each request's
time, so the signatures are reproducible; nothing is sent anywhere.
"""

import datetime
import json
import sys
from urllib.parse import quote

import botocore.auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials


class Recording(botocore.auth.S3SigV4Auth):
    """botocore's S3 signer, keeping its canonical request (printed when a test fails). The
    payload hash is the request's (botocore would hash the body it holds: the tests pass
    hashes of bodies they do not send, a 20 MiB one among them)."""

    payload_hash = None

    def payload(self, request):
        return self.payload_hash

    def canonical_request(self, request):
        self.recorded = super().canonical_request(request)
        return self.recorded


def sign(r):
    now = datetime.datetime.fromtimestamp(r["date"], datetime.timezone.utc).replace(tzinfo=None)
    botocore.auth.get_current_datetime = lambda: now
    credentials = Credentials(r["access"], r["secret"], r.get("token"))
    url = "https://" + r["host"] + quote(r["path"], safe="/~")
    if r.get("expires") is not None:
        if r["query"]:
            url += "?" + "&".join(quote(k, safe="-_.~") + "=" + quote(v, safe="-_.~") for k, v in r["query"])
        request = AWSRequest(method=r["method"], url=url, headers={"Host": r["host"]})
        botocore.auth.S3SigV4QueryAuth(credentials, "s3", r["region"], expires=r["expires"]).add_auth(request)
        return {"query": request.url.split("?", 1)[1]}
    request = AWSRequest(method=r["method"], url=url, params=[tuple(p) for p in r["query"]] or None)
    for name, value in r["headers"]:
        request.headers[name] = value  # appends: a repeated name keeps every value, in order
    auth = Recording(credentials, "s3", r["region"])
    auth.payload_hash = r["payload"]
    auth.add_auth(request)
    return {"authorization": request.headers["Authorization"], "canonical": auth.recorded}


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        requests = json.load(f)
    json.dump([sign(r) for r in requests], sys.stdout)


if __name__ == "__main__":
    main()
