#!/usr/bin/env python3
"""Peer benchmark: python-dynamodb-lock (a port of awslabs' DynamoDB lock
client: record version numbers, heartbeats) on DynamoDB Local, defaults.

1. Uncontended acquire_lock + release_lock cycles for --cycles-ms.
2. Handoff: a holder (this process) takes the lock, keeps it for a random
   0.2-5.2 s and releases it; a waiter (another process) calls
   acquire_lock with the library's defaults (retry every heartbeat period,
   5 s). Times are time.monotonic_ns() (CLOCK_MONOTONIC, as leasehold-bench
   reads it).

Prints one JSON line: {"cycles", "seconds", "requests_per_cycle",
"releases": [ns...], "acquisitions": [[call_ns, acquired_ns]...], "note"}.
"""
import datetime
import multiprocessing
import os
import random
import time
import uuid

import boto3
from python_dynamodb_lock.python_dynamodb_lock import DynamoDBLockClient

import peer_bench

ENDPOINT = "http://127.0.0.1:8000"


def local(make):
    """boto3.resource or boto3.client (`make`) for DynamoDB Local."""
    return make(
        "dynamodb",
        endpoint_url=ENDPOINT,
        region_name=os.environ.get("AWS_REGION", "us-east-1"),
        aws_access_key_id=os.environ.get("AWS_ACCESS_KEY_ID", "local"),
        aws_secret_access_key=os.environ.get("AWS_SECRET_ACCESS_KEY", "local"),
    )


def resource():
    return local(boto3.resource)


def waiter(table, key, deadline_ns, queue):
    client = DynamoDBLockClient(resource(), table_name=table)
    got = []
    try:
        while time.monotonic_ns() < deadline_ns - 6_000_000_000:
            time.sleep(0.1)
            call = time.monotonic_ns()
            lock = client.acquire_lock(key)  # the library's defaults
            acquired = time.monotonic_ns()
            time.sleep(0.05)
            client.release_lock(lock)
            got.append((call, acquired))
    finally:
        client.close()
        queue.put(got)


def main():
    args = peer_bench.parse_args(handoff_ms=30000)

    table = "peer_pylock_" + uuid.uuid4().hex[:8]
    low = local(boto3.client)
    DynamoDBLockClient.create_dynamodb_table(low, table_name=table)
    low.get_waiter("table_exists").wait(TableName=table)
    try:
        client = DynamoDBLockClient(resource(), table_name=table)

        def cycle():
            lock = client.acquire_lock("cycles")
            client.release_lock(lock)

        n, seconds = peer_bench.run_cycles(cycle, args)

        releases = []
        acquisitions = []
        if args.handoff_ms > 0:
            key = "handoff"
            deadline = time.monotonic_ns() + args.handoff_ms * 1_000_000
            queue = multiprocessing.Queue()
            proc = multiprocessing.Process(target=waiter, args=(table, key, deadline, queue))
            proc.start()
            table_res = resource().Table(table)
            quick = datetime.timedelta(milliseconds=10)
            while time.monotonic_ns() < deadline - 6_000_000_000:
                lock = client.acquire_lock(key, retry_period=quick,
                                           retry_timeout=datetime.timedelta(seconds=60))
                time.sleep(random.uniform(0.2, 5.2))
                releases.append(time.monotonic_ns())
                client.release_lock(lock)
                # Leave it to the waiter: wait until it has taken it.
                until = time.monotonic() + 10
                while time.monotonic() < until:
                    item = table_res.get_item(
                        Key={"lock_key": key, "sort_key": "-"}, ConsistentRead=True
                    ).get("Item")
                    if item is not None:
                        break
                    time.sleep(0.01)
            acquisitions = queue.get(timeout=60)
            proc.join(timeout=30)
        client.close()
    finally:
        low.delete_table(TableName=table)

    peer_bench.report(
        n, seconds, 3, releases, acquisitions,
        "acquire_lock reads the item, then puts it conditionally; release_lock deletes it: "
        "3 requests a cycle, no fencing token. A waiter retries every heartbeat period (5 s by default).",
    )


if __name__ == "__main__":
    main()
