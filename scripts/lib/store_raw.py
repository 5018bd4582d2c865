#!/usr/bin/env python3
"""Raw access to a leasehold store, beside leasehold: for scripts/compat.sh.

    store_raw.py dump STORE ARGS...      # the store's whole content, as text
    store_raw.py future STORE N ARGS...  # the epoch marker says protocol N

ARGS per STORE (what compat.sh made the store with):
    sqlite FILE | postgres URL TABLE | redis URL PREFIX | etcd ENDPOINT PREFIX
    | dynamodb ENDPOINT TABLE | s3 ENDPOINT BUCKET PREFIX
    | azblob CONTAINER (Azurite's well-known account, 127.0.0.1:10000)

`dump` prints everything the store holds under the store's name (rows,
hashes, keys with their revisions, items, objects with their ETags, blobs
with their ETags and metadata), so that two dumps are equal only if nothing
was written in between. `future` writes the protocol field of the store's
epoch marker (each store's crate docs say where it is) and nothing else.
The tools it runs are those the test servers come with (sqlite3 is
Python's, psql, redis-cli, etcdctl) and boto3 (moto's venv has it); Azure
requests are signed here (Shared Key), as there is no Azure SDK.
"""

import base64
import datetime
import hashlib
import hmac
import json
import sqlite3
import subprocess
import sys
import urllib.parse
import urllib.request


def run(*args, stdin=None):
    return subprocess.run(args, check=True, capture_output=True, text=True,
                          input=stdin).stdout


def sqlite_(op, n, path):
    db = sqlite3.connect(path)
    if op == "future":
        db.execute("UPDATE leasehold_store SET protocol = ?", (n,))
        db.commit()
        return ""
    out = []
    for table in ("leasehold_store", "leasehold_leases"):
        out += [repr(r) for r in db.execute(f"SELECT * FROM {table} ORDER BY 1")]
    return "\n".join(out)


def postgres(op, n, url, table):
    if op == "future":
        # The epoch row keeps the protocol in its owner_pid column.
        return run("psql", "-qAt", url, "-c",
                   f"UPDATE {table} SET owner_pid = {n} WHERE key = '#epoch'")
    return run("psql", "-qAt", url, "-c", f"SELECT * FROM {table} ORDER BY key")


def redis(op, n, url, prefix):
    u = urllib.parse.urlsplit(url)
    cli = ["redis-cli", "-h", u.hostname, "-p", str(u.port or 6379), "--no-auth-warning",
           "-n", u.path.strip("/") or "0"]
    if u.password:
        cli += ["-a", urllib.parse.unquote(u.password)]
    if op == "future":
        return run(*cli, "HSET", f"{prefix}#epoch", "protocol", str(n))
    keys = sorted(run(*cli, "--scan", "--pattern", f"{prefix}*").split())
    out = []
    for k in keys:
        kind = run(*cli, "TYPE", k).strip()
        if kind == "hash":
            out.append(f"{k} {run(*cli, 'HGETALL', k)}")
        elif kind == "zset":
            out.append(f"{k} {run(*cli, 'ZRANGE', k, '0', '-1', 'WITHSCORES')}")
        else:
            out.append(f"{k} {kind}")
    return "\n".join(out)


def etcd(op, n, endpoint, prefix):
    cli = ["etcdctl", f"--endpoints={endpoint}"]
    env_get = json.loads(run(*cli, "get", prefix, "--prefix", "-w", "json"))
    kvs = env_get.get("kvs", [])
    if op == "future":
        marker = prefix + "epoch"
        for kv in kvs:
            if base64.b64decode(kv["key"]).decode() == marker:
                value = json.loads(base64.b64decode(kv["value"]))
                value["protocol"] = n
                return run(*cli, "put", marker, json.dumps(value))
        raise SystemExit(f"no etcd marker {marker}")
    return "\n".join(
        f"{base64.b64decode(kv['key']).decode()} rev {kv['mod_revision']} "
        f"{base64.b64decode(kv.get('value', '')).decode()}" for kv in kvs)


def aws(service, endpoint):
    import boto3
    return boto3.client(service, endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id="leaseholdtests",
                        aws_secret_access_key="leasehold-test-secret")


def dynamodb(op, n, endpoint, table):
    db = aws("dynamodb", endpoint)
    if op == "future":
        db.update_item(TableName=table, Key={"lease_key": {"S": "#leasehold-epoch"}},
                       UpdateExpression="SET protocol = :p",
                       ExpressionAttributeValues={":p": {"N": str(n)}})
        return ""
    items = db.scan(TableName=table, ConsistentRead=True)["Items"]
    return "\n".join(sorted(json.dumps(i, sort_keys=True) for i in items))


def s3(op, n, endpoint, bucket, prefix):
    c = aws("s3", endpoint)
    marker = prefix + "!leasehold-epoch"
    if op == "future":
        body = json.loads(c.get_object(Bucket=bucket, Key=marker)["Body"].read())
        body["protocol"] = n
        c.put_object(Bucket=bucket, Key=marker, Body=json.dumps(body).encode())
        return ""
    out = []
    for o in c.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", []):
        body = c.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
        out.append(f"{o['Key']} {o['ETag']} {body!r}")
    return "\n".join(out)


AZ_ACCOUNT = "devstoreaccount1"
AZ_KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/"
          "K1SZFPTOtr/KBHBeksoGMGw==")
AZ_URL = "http://127.0.0.1:10000/" + AZ_ACCOUNT


def az(method, path, query, headers=None):
    """One Shared Key signed request to Azurite; the response's body."""
    headers = dict(headers or {})
    headers["x-ms-date"] = datetime.datetime.now(datetime.timezone.utc).strftime(
        "%a, %d %b %Y %H:%M:%S GMT")
    headers["x-ms-version"] = "2021-08-06"
    # Shared Key signs an empty Content-Length for 0, and Content-Type.
    length = headers.get("Content-Length", "")
    length = "" if length == "0" else length
    ctype = headers.get("Content-Type", "")
    ms = "".join(f"{k.lower()}:{v}\n" for k, v in sorted(headers.items(),
                                                         key=lambda kv: kv[0].lower())
                 if k.lower().startswith("x-ms-"))
    resource = f"/{AZ_ACCOUNT}/{AZ_ACCOUNT}{path}" + "".join(
        f"\n{k}:{v}" for k, v in sorted(query.items()))
    to_sign = f"{method}\n\n\n{length}\n\n{ctype}\n\n\n\n\n\n\n{ms}{resource}"
    sig = base64.b64encode(hmac.new(base64.b64decode(AZ_KEY), to_sign.encode(),
                                    hashlib.sha256).digest()).decode()
    headers["Authorization"] = f"SharedKey {AZ_ACCOUNT}:{sig}"
    url = AZ_URL + path + ("?" + "&".join(f"{k}={v}" for k, v in query.items())
                           if query else "")
    req = urllib.request.Request(url, method=method, headers=headers,
                                 data=b"" if method == "PUT" else None)
    with urllib.request.urlopen(req) as resp:
        return resp.read().decode(), dict(resp.headers)


def azblob(op, n, container):
    marker = f"/{container}/~leasehold-epoch"
    if op == "future":
        # Setting metadata replaces it all: keep the marker's other entries.
        _, h = az("HEAD", marker, {})
        meta = {k: v for k, v in h.items() if k.lower().startswith("x-ms-meta-")}
        meta["x-ms-meta-leaseholdprotocol"] = str(n)
        meta["Content-Length"] = "0"
        meta["Content-Type"] = "application/octet-stream"
        az("PUT", marker, {"comp": "metadata"}, meta)
        return ""
    body, _ = az("GET", f"/{container}", {"comp": "list", "include": "metadata",
                                         "restype": "container"})
    # Everything about each blob (ETag, times, metadata, lease state).
    return body.split("<Blobs>", 1)[-1]


STORES = {"sqlite": sqlite_, "postgres": postgres, "redis": redis, "etcd": etcd,
          "dynamodb": dynamodb, "s3": s3, "azblob": azblob}

if __name__ == "__main__":
    op, store, *rest = sys.argv[1:]
    n = None
    if op == "future":
        n, *rest = rest
        n = int(n)
    print(STORES[store](op, n, *rest))
