#!/usr/bin/env bash
# One real Azure run that settles the data-plane unknowns the simulator takes as parameters
# (U1, U4, U5, U7, U8, U12 of ../shared/contracts/dataplane.md section 7). Runs in YOUR
# subscription with YOUR az login; creates one resource group and deletes it at the end
# (KEEP=1 keeps it). NOT RUN by the project: only prober.py and analyze.py are tested, against
# the simulator (tests/azure_kit.rs). See README.md before running.
#
#   az login && az account set -s <subscription>
#   LOCATION=westeurope bash tests/dataplane/azure-kit/run.sh
#
# Needs: az (2.60+), jq, ssh, python3 locally. Cost: three B1s VMs, one Standard LB, two public
# IPs for about 30 minutes.
set -euo pipefail

KIT=$(cd "$(dirname "$0")" && pwd)
LOCATION=${LOCATION:-eastus}
RG=${RG:-cutover-dp-kit-$(date +%s)}
OUT=${OUT:-$PWD/azure-kit-out-$(date +%Y%m%dT%H%M%S)}
SIZE=${SIZE:-Standard_B1s}
IMAGE=${IMAGE:-Ubuntu2204}
INTERVAL=5 # probe interval, s (CPA's default)
mkdir -p "$OUT"
log() { printf '==> %s\n' "$*" >&2; }
now() { date +%s.%N; }
mark() { printf '{"mark":"%s","t":%s,"backend":"%s"}\n' "$2" "$(now)" "$3" >>"$OUT/$1.marks.jsonl"; }

cleanup() {
  if [ "${KEEP:-0}" = 1 ]; then
    log "kept resource group $RG (az group delete -n $RG --yes --no-wait)"
  else
    log "deleting resource group $RG"
    az group delete -n "$RG" --yes --no-wait || true
  fi
}
trap cleanup EXIT

ME=${PROBER_ADMIN_CIDR:-$(curl -fsS https://api.ipify.org)/32} # where ssh comes from

log "resource group $RG in $LOCATION, output in $OUT"
az group create -n "$RG" -l "$LOCATION" -o none
az network nsg create -g "$RG" -n nsg -o none
az network vnet create -g "$RG" -n vnet --address-prefix 10.50.0.0/16 \
  --subnet-name s --subnet-prefix 10.50.0.0/24 --nsg nsg -o none
az network public-ip create -g "$RG" -n lbpip --sku Standard -o none
az network public-ip create -g "$RG" -n probepip --sku Standard -o none
PROBE_IP=$(az network public-ip show -g "$RG" -n probepip --query ipAddress -o tsv)
FE=$(az network public-ip show -g "$RG" -n lbpip --query ipAddress -o tsv)
az network nsg rule create -g "$RG" --nsg-name nsg -n ssh --priority 100 \
  --source-address-prefixes "$ME" --destination-port-ranges 22 --access Allow -o none
az network nsg rule create -g "$RG" --nsg-name nsg -n svc --priority 110 \
  --source-address-prefixes "$PROBE_IP" --destination-port-ranges 80 --access Allow -o none
az network nsg rule create -g "$RG" --nsg-name nsg -n probe --priority 120 \
  --source-address-prefixes AzureLoadBalancer --destination-port-ranges 8080 --access Allow -o none

# Backends run backend.py (the simulator's member protocol) as a service.
cat >"$OUT/cloud-init.yaml" <<EOF
#cloud-config
packages: [tcpdump]
write_files:
  - path: /opt/backend.py
    permissions: '0755'
    encoding: b64
    content: $(base64 -w0 "$KIT/backend.py")
runcmd:
  - [sh, -c, 'nohup python3 /opt/backend.py "\$(hostname)" >/var/log/backend.log 2>&1 &']
EOF
for vm in vm1 vm2; do
  ip=10.50.0.$([ $vm = vm1 ] && echo 4 || echo 5)
  az vm create -g "$RG" -n $vm --image "$IMAGE" --size "$SIZE" --vnet-name vnet --subnet s \
    --private-ip-address "$ip" --public-ip-address "" --nsg "" --admin-username azureuser \
    --generate-ssh-keys --custom-data "$OUT/cloud-init.yaml" -o none &
done
az vm create -g "$RG" -n probe --image "$IMAGE" --size "$SIZE" --vnet-name vnet --subnet s \
  --public-ip-address probepip --nsg "" --admin-username azureuser --generate-ssh-keys -o none &
wait

# One Standard LB: an IP-based pool (port 80), a NIC-based pool (port 81), a single-member
# IP-based pool (port 82); one HTTP probe on 8080, 5 s x 2 as cloud-provider-azure writes it.
az network lb create -g "$RG" -n lb --sku Standard --public-ip-address lbpip \
  --frontend-ip-name fe --backend-pool-name unused -o none
az network lb probe create -g "$RG" --lb-name lb -n hp --protocol Http --port 8080 --path / \
  --interval $INTERVAL --probe-threshold 2 -o none
az network lb address-pool create -g "$RG" --lb-name lb -n ippool --vnet vnet \
  --backend-address name=vm1 ip-address=10.50.0.4 --backend-address name=vm2 ip-address=10.50.0.5 -o none
az network lb address-pool create -g "$RG" --lb-name lb -n single --vnet vnet \
  --backend-address name=vm2 ip-address=10.50.0.5 -o none
az network lb address-pool create -g "$RG" --lb-name lb -n nicpool -o none
for vm in vm1 vm2; do
  nic=$(az vm show -g "$RG" -n $vm --query 'networkProfile.networkInterfaces[0].id' -o tsv | xargs basename)
  az network nic ip-config address-pool add -g "$RG" --nic-name "$nic" --ip-config-name "ipconfig$vm" \
    --lb-name lb --address-pool nicpool -o none
done
for r in "ip 80 ippool" "nic 81 nicpool" "single 82 single"; do
  set -- $r
  az network lb rule create -g "$RG" --lb-name lb -n "$1" --protocol Tcp --frontend-port "$2" \
    --backend-port 80 --frontend-ip-name fe --backend-pool-name "$3" --probe-name hp \
    --disable-outbound-snat true --idle-timeout 4 --enable-tcp-reset true -o none
done

SSH="ssh -o StrictHostKeyChecking=accept-new -o UserKnownHostsFile=$OUT/known_hosts"
on_probe() { $SSH azureuser@"$PROBE_IP" "$@"; }
on() { local vm=$1; shift; $SSH -J azureuser@"$PROBE_IP" azureuser@"$([ "$vm" = vm1 ] && echo 10.50.0.4 || echo 10.50.0.5)" "$@"; }
$SSH -o ConnectTimeout=10 azureuser@"$PROBE_IP" true
scp -o UserKnownHostsFile="$OUT/known_hosts" "$KIT/prober.py" azureuser@"$PROBE_IP":prober.py
sleep 30 # probes up

# Admin state of one entry through the pool's loadBalancerBackendAddresses (az rest, the PUT
# cutover makes, for IP- and NIC-based pools alike); then poll the LB until its
# provisioningState is Succeeded (precision: one az call, ~1 s; the PUT's own answer may come
# after the operation started, so U1 is measured from the Succeeded mark).
wait_lb() { until [ "$(az network lb show -g "$RG" -n lb --query provisioningState -o tsv)" = Succeeded ]; do sleep 0.5; done; }
admin() { # pool vm state: the pool's PUT with the entry's adminState changed (as cutover writes it)
  local id; id=$(az network lb address-pool show -g "$RG" --lb-name lb -n "$1" --query id -o tsv)
  az rest --method get --url "https://management.azure.com$id?api-version=2024-05-01" >"$OUT/pool.json"
  jq --arg vm "$2" --arg s "$3" '(.properties.loadBalancerBackendAddresses[]
      | select(.name == $vm or ((.properties.networkInterfaceIPConfiguration.id // "") | test("/" + $vm; "i")))
      | .properties.adminState) = $s
    | {properties: {loadBalancerBackendAddresses: .properties.loadBalancerBackendAddresses}}' \
    "$OUT/pool.json" >"$OUT/pool-put.json"
  az rest --method put --url "https://management.azure.com$id?api-version=2024-05-01" \
    --body @"$OUT/pool-put.json" -o none
}
probe_run() { # name port seconds [connect-timeout]
  on_probe "python3 prober.py --target $FE:$2 --rate 100 --streams 8 --duration $3 --connect-timeout ${4:-1}" >"$OUT/$1.jsonl" &
}

log "U1, U12: admin Down on vm1 (IP-based pool), then None (U7)"
probe_run u1 80 120
sleep 20
mark u1 down_put vm1; admin ippool vm1 Down; wait_lb; mark u1 down_succeeded vm1
sleep 40
mark u1 none_put vm1; admin ippool vm1 None; wait_lb; mark u1 none_succeeded vm1
wait

log "U1 on the NIC-based pool"
probe_run u1nic 81 80
sleep 20
mark u1nic down_put vm1; admin nicpool vm1 Down; wait_lb; mark u1nic down_succeeded vm1
wait
admin nicpool vm1 None; wait_lb

log "U4: vm1 removed from the IP-based pool"
probe_run u4 80 80
sleep 20
mark u4 remove_put vm1
az network lb address-pool address remove -g "$RG" --lb-name lb --pool-name ippool -n vm1 -o none
wait_lb; mark u4 remove_succeeded vm1
wait
az network lb address-pool address add -g "$RG" --lb-name lb --pool-name ippool -n vm1 \
  --vnet vnet --ip-address 10.50.0.4 -o none

log "U5: vm1 answers no SYN (its SYN-ACKs dropped), then Down on the NIC-based pool"
on vm1 "sudo iptables -A OUTPUT -p tcp --sport 80 --tcp-flags SYN,ACK SYN,ACK -j DROP; \
  (sudo timeout 100 tcpdump -i eth0 -tt -n -l 'tcp[tcpflags] == tcp-syn and dst port 80' >/tmp/syns.txt 2>/dev/null &)"
probe_run u5 81 90 20
sleep 15
mark u5 halfopen_down_put vm1; admin nicpool vm1 Down; wait_lb; mark u5 halfopen_down_succeeded vm1
wait
on vm1 "cat /tmp/syns.txt" | awk '{ n = split($3, a, "."); print $1, a[n] }' >"$OUT/u5.syns.txt"
on vm1 "sudo iptables -D OUTPUT -p tcp --sport 80 --tcp-flags SYN,ACK SYN,ACK -j DROP"
admin nicpool vm1 None; wait_lb

log "U8: the only member of a pool probed down"
probe_run u8 82 90
sleep 20
mark u8 single_down vm2; on vm2 "touch /tmp/unhealthy"
wait
on vm2 "rm -f /tmp/unhealthy"

log "analysis"
{
  python3 "$KIT/analyze.py" "$OUT/u1.jsonl" "$OUT/u1.marks.jsonl" --probe-interval $INTERVAL
  python3 "$KIT/analyze.py" "$OUT/u1nic.jsonl" "$OUT/u1nic.marks.jsonl" --probe-interval $INTERVAL
  python3 "$KIT/analyze.py" "$OUT/u4.jsonl" "$OUT/u4.marks.jsonl"
  python3 "$KIT/analyze.py" "$OUT/u5.jsonl" "$OUT/u5.marks.jsonl" --syns "$OUT/u5.syns.txt"
  python3 "$KIT/analyze.py" "$OUT/u8.jsonl" "$OUT/u8.marks.jsonl" --window 60
} | tee "$OUT/result.txt"
log "results in $OUT/result.txt; run the bench with the --unknowns lines merged"
