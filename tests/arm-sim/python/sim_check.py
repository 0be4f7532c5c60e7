"""Drive arm-sim with the official Azure SDK for Python (second, independent client).

Started by tests/arm-sim/tests/python_sdk.rs with the simulator running over TLS. Reads its
parameters from the environment, prints one line per check, and exits non-zero on the first
failure (the Rust test shows stdout/stderr).
"""

import os
import sys

from azure.core.exceptions import HttpResponseError
from azure.identity import ClientSecretCredential
from azure.mgmt.network import NetworkManagementClient
from azure.mgmt.network.models import (
    BackendAddressPool,
    LoadBalancerBackendAddress,
)

def env(name):
    value = os.environ.get(name)
    if not value:
        sys.exit(f"missing environment variable {name}")
    return value


def check(cond, message):
    if not cond:
        raise AssertionError(message)
    print(f"ok: {message}", flush=True)


def main():
    url = env("SIM_URL")
    ca = env("SIM_CA_FILE")
    sub, rg, lb, pool_name = env("SIM_SUBSCRIPTION"), env("SIM_RG"), env("SIM_LB"), env("SIM_POOL")

    # The simulator is the AAD authority: no instance discovery against login.microsoftonline.com.
    credential = ClientSecretCredential(
        env("SIM_TENANT"),
        env("SIM_CLIENT_ID"),
        env("SIM_CLIENT_SECRET"),
        authority=url,
        disable_instance_discovery=True,
        connection_verify=ca,
    )
    token = credential.get_token("https://management.azure.com/.default")
    check(bool(token.token) and token.expires_on > 0, "ClientSecretCredential got a token from the simulator")

    # No api_version anywhere: the SDK sends its default (2026-03-01 for 33.1.0), which the Rust
    # test checks in the simulator's request log.
    client = NetworkManagementClient(
        credential,
        sub,
        base_url=url,
        credential_scopes=["https://management.azure.com/.default"],
        connection_verify=ca,
    )
    ops = client.load_balancer_backend_address_pools

    pools = list(ops.list(rg, lb))
    names = [p.name for p in pools]
    check(pool_name in names and len(pools) >= 2, f"list returned {len(pools)} pools across pages: {names}")

    pool = ops.get(rg, lb, pool_name)
    entries = pool.load_balancer_backend_addresses or []
    check(len(entries) > 0 and pool.etag.startswith('W/"'), f"get {pool_name}: {len(entries)} entries, etag {pool.etag}")
    target = entries[0].name
    old_etag = pool.etag

    # Set the first entry Down and wait for the long-running operation.
    entries[0].admin_state = "Down"
    poller = ops.begin_create_or_update(rg, lb, pool_name, pool, polling_interval=1)
    result = poller.result(timeout=60)
    check(poller.status() == "Succeeded", f"poller finished with status {poller.status()}")
    got = {e.name: e.admin_state for e in result.load_balancer_backend_addresses}
    check(got.get(target) == "Down", f"entry {target} is Down after the operation")
    check(result.provisioning_state == "Succeeded", "final GET shows provisioningState Succeeded")

    again = ops.get(rg, lb, pool_name)
    check(again.etag != old_etag, "etag changed after the write")

    # A PUT with the stale etag must fail with 412.
    try:
        ops.begin_create_or_update(
            rg, lb, pool_name, again,
            headers={"If-Match": old_etag},
        ).result(timeout=30)
    except HttpResponseError as err:
        code = err.error.code if err.error else None
        check(err.status_code == 412 and code == "PreconditionFailed", f"stale If-Match rejected: {err.status_code} {code}")
    else:
        raise AssertionError("PUT with a stale If-Match succeeded")

    # Invalid adminState: 400 with an ARM error body.
    bad = BackendAddressPool(load_balancer_backend_addresses=[
        LoadBalancerBackendAddress(name="x", ip_address="10.0.0.1", admin_state="Drain"),
    ])
    try:
        ops.begin_create_or_update(rg, lb, "python-bad", bad).result(timeout=30)
    except HttpResponseError as err:
        check(err.status_code == 400, f"adminState Drain rejected with {err.status_code}")
    else:
        raise AssertionError("adminState Drain accepted")
    print("all python checks passed", flush=True)


if __name__ == "__main__":
    main()
