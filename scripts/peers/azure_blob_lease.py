#!/usr/bin/env python3
"""Peer benchmark: the Python azure-storage-blob BlobLeaseClient on Azurite.

Uncontended acquire + release cycles on one blob, with the library's
defaults, for --cycles-ms. BlobLeaseClient has no waiting primitive (one
acquire is one attempt), so there is no handoff latency to measure with its
defaults. Prints one JSON line: {"cycles", "seconds", "requests_per_cycle",
"note"}.
"""
import uuid

from azure.storage.blob import BlobServiceClient

import peer_bench

args = peer_bench.parse_args(handoff_ms=0)

service = BlobServiceClient.from_connection_string(
    "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
    "AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;"
    "BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;",
)
container = service.get_container_client("peer" + uuid.uuid4().hex[:12])
container.create_container()
try:
    blob = container.get_blob_client("lock")
    blob.upload_blob(b"")

    def cycle():
        lease = blob.acquire_lease(lease_duration=30)
        lease.release()

    n, seconds = peer_bench.run_cycles(cycle, args)
finally:
    container.delete_container()

peer_bench.report(
    n, seconds, 2, None, None,
    "acquire_lease + release: 2 requests a cycle (no holder record, no fencing token); "
    "BlobLeaseClient has no wait: a caller writes its own retry loop, so it has no handoff latency of its own.",
)
