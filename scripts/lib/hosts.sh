# Hosts on this machine, for the scripts that play several: each host is a
# network namespace with its own address on a private bridge, and a mount
# namespace of its own; all of them see the machine's /dev/shm (the pool).
# Sourced by run-hosts.sh and bench-pool-index.sh; needs root.
#   hosts_up TAG N PREFIX   hosts 0..N-1 at PREFIX.10, PREFIX.11, ... (the
#                           network lives in namespaces only: no address of
#                           the machine is on it, so PREFIX cannot clash)
#   on I CMD...             runs CMD on host I
#   hosts_down              removes them (from the EXIT trap)
hosts=() holders=() ips=() hosts_lan=

hosts_up() {
  local tag=$1 n=$2 prefix=$3 i ns
  hosts_lan=maru-lan-$tag-$$
  ip netns add "$hosts_lan"
  ip -n "$hosts_lan" link add br0 type bridge
  ip -n "$hosts_lan" link set br0 up
  for ((i = 0; i < n; i++)); do
    ns=maru-ns-$tag-$$-$i
    ips+=("$prefix.$((10 + i))")
    ip netns add "$ns"
    hosts+=("$ns")
    ip link add "$tag$i" netns "$hosts_lan" type veth peer name eth0 netns "$ns"
    ip -n "$hosts_lan" link set "$tag$i" master br0 up
    ip -n "$ns" addr add "${ips[$i]}/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    # `ip netns exec` gives what it runs a mount namespace of its own; this
    # process holds it, and every later command of the host enters it.
    ip netns exec "$ns" sleep infinity &
    holders+=($!)
  done
  for ((i = 0; i < n; i++)); do
    until [ "$(readlink "/proc/${holders[$i]}/exe")" = "$(command -v sleep)" ]; do sleep 0.05; done
  done
}

on() {
  local h=$1
  shift
  nsenter -t "${holders[$h]}" -n -m "$@"
}

hosts_down() {
  local p ns
  for p in "${holders[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  for ns in "${hosts[@]}" "$hosts_lan"; do [ -n "$ns" ] && ip netns del "$ns" 2>/dev/null; done
  return 0
}
