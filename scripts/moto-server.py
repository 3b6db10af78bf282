#!/usr/bin/env python3
"""A throwaway S3-protocol server (moto's standalone `moto_server`) with request
authentication on, for Coffer's tests and benchmarks.

    moto-server.py [--no-auth] INFO_FILE [PARENT_PID]

Starts `moto_server -H 127.0.0.1 -p PORT` on a free port with INITIAL_NO_AUTH_ACTION_COUNT=3,
spends those three unauthenticated actions creating an IAM user, its access key and an
inline policy allowing s3:*, then writes

    {"endpoint": "http://127.0.0.1:PORT", "accessKeyId": "...", "secretAccessKey": "...", "pid": N}

to INFO_FILE (written whole, then renamed into place). From then on moto checks every
request's AWS Signature Version 4 against that key: a wrong secret gets 403
SignatureDoesNotMatch. The server stops when PARENT_PID (default: this script's parent)
ends, or on SIGTERM/SIGINT.

--no-auth leaves authentication off (any key is accepted; the file names test/test): moto
5 cannot check presigned URLs with authentication on (its IAM check reads only the
Authorization header and answers 500 to query authentication), so tests that follow
presigned URLs use such a server; botocore checks our presigned signatures instead
(Tests/CofferS3Tests/SigV4DifferentialTests).

Needs `pip install 'moto[server]'` (it brings boto3); run with that environment's python.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time

NO_AUTH_ACTIONS = 3


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, process, seconds=60):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            # A bare TCP connect: an HTTP request would spend one of the unauthenticated actions.
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.1)
    return False


def start_moto(authenticate):
    server = os.path.join(os.path.dirname(sys.executable), "moto_server")
    if not os.access(server, os.X_OK):
        sys.exit(f"moto_server is not beside {sys.executable}: pip install 'moto[server]'")
    env = dict(os.environ)
    env.pop("INITIAL_NO_AUTH_ACTION_COUNT", None)
    if authenticate:
        env["INITIAL_NO_AUTH_ACTION_COUNT"] = str(NO_AUTH_ACTIONS)
    for _ in range(5):
        port = free_port()
        process = subprocess.Popen(
            [server, "-H", "127.0.0.1", "-p", str(port)], env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if wait_for_port(port, process):
            return port, process
        process.kill()
        process.wait()
    sys.exit("moto_server did not start (five ports tried)")


def bootstrap(endpoint):
    import boto3  # moto[server] depends on it

    iam = boto3.client(
        "iam", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="bootstrap",
        aws_secret_access_key="bootstrap")
    iam.create_user(UserName="coffer")
    key = iam.create_access_key(UserName="coffer")["AccessKey"]
    iam.put_user_policy(
        UserName="coffer", PolicyName="coffer-s3",
        PolicyDocument=json.dumps({
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
        }))
    return key["AccessKeyId"], key["SecretAccessKey"]


def main():
    arguments = sys.argv[1:]
    authenticate = "--no-auth" not in arguments
    arguments = [a for a in arguments if a != "--no-auth"]
    if not arguments:
        sys.exit(__doc__)
    info_file = arguments[0]
    parent = int(arguments[1]) if len(arguments) > 1 else os.getppid()
    port, process = start_moto(authenticate)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(True))
    try:
        endpoint = f"http://127.0.0.1:{port}"
        key_id, secret = bootstrap(endpoint) if authenticate else ("test", "test")
        temporary = info_file + ".tmp"
        with open(temporary, "w") as f:
            json.dump({"endpoint": endpoint, "accessKeyId": key_id, "secretAccessKey": secret, "pid": process.pid}, f)
        os.rename(temporary, info_file)
        while not stopping and process.poll() is None:
            try:
                os.kill(parent, 0)
            except OSError:
                break
            time.sleep(0.5)
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


if __name__ == "__main__":
    main()
