#!/usr/bin/env bash
# TCP callers are nobody unless they prove who they are (docs/security.md,
# "TCP"): plain TCP without credentials, a bearer token (MARU_TOKEN_FILE),
# mutual TLS with a mapped client certificate (MARU_TLS_CA / _CERT / _KEY),
# and each refusal: an unknown token, a certificate from another CA, no
# client certificate, a token file others may read; the fast lane over TCP
# off by default with TLS, and a TLS client's uid on it when turned on.
# Real servers, real clients, certificates made here with openssl.
#   tests/tcp_auth_test.sh BUILD_DIR
set -uo pipefail
build=$(cd "$1" && pwd)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

work=$(mktemp -d /tmp/maru-tcp-auth-test.XXXXXX)
plain_pool=/dev/shm/maru-tcp-auth-test-$$-plain.pool
tls_pool=/dev/shm/maru-tcp-auth-test-$$-tls.pool
tls_lane_pool=/dev/shm/maru-tcp-auth-test-$$-tls-lane.pool
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  rm -f "$plain_pool" "$tls_pool" "$tls_lane_pool"
  rm -rf "$work"
}
trap cleanup EXIT

bin_server=$build/src/meta/maru-server
bin_ctl=$build/tools/maructl
client=$build/tests/direct_client

# --- certificates: our CA, the server's, a mapped client's, another CA's -------
cd "$work" || exit 1
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out "$1" 2>/dev/null; }
ca() { key $1.key && openssl req -x509 -key $1.key -out $1.pem -days 1 -subj "/CN=$1" 2>/dev/null; }
# cert NAME CA CN [SAN]
cert() {
  key $1.key && openssl req -new -key $1.key -out $1.csr -subj "/CN=$3" 2>/dev/null &&
    openssl x509 -req -in $1.csr -CA $2.pem -CAkey $2.key -CAcreateserial -out $1.pem -days 1 \
      ${4:+-extfile <(printf 'subjectAltName=%s' "$4")} 2>/dev/null
}
ca maru-ca && ca other-ca &&
  cert server maru-ca localhost "DNS:localhost,IP:127.0.0.1" &&
  cert vllm maru-ca vllm-0 && cert stranger other-ca vllm-0 || { echo "FAIL: openssl"; exit 1; }

# --- two servers: plain TCP with a token file, and mutual TLS --------------------
printf '# tokens\nright-token 1001:1001\n' > tokens
chmod 600 tokens
"$bin_ctl" mkpool "$plain_pool" --size 64M --mode 666 >/dev/null || fail "mkpool"
"$bin_ctl" mkpool "$tls_pool" --size 64M --mode 666 >/dev/null || fail "mkpool"
base=$((20000 + RANDOM % 20000))
plain_tcp=tcp://127.0.0.1:$base
tls_tcp=tcp://127.0.0.1:$((base + 1))
start() {  # start NAME POOL TCP ARGS...
  local name=$1 pool=$2 tcp=$3
  shift 3
  "$bin_server" --pool "$pool" --db "$work/$name.db" --listen "unix://$work/$name.sock" \
    --listen "$tcp" "$@" 2>"$work/$name.log" &
  pids+=($!)
  # Ready once the Unix socket answers; the TCP port is bound before it.
  for _ in $(seq 200); do
    "$bin_ctl" df --server "unix://$work/$name.sock" >/dev/null 2>&1 && return 0
    kill -0 "${pids[-1]}" 2>/dev/null || break
    sleep 0.05
  done
  fail "server $name did not start: $(cat "$work/$name.log")"
  return 1
}
start plain "$plain_pool" "$plain_tcp" --token-file "$work/tokens" || exit 1
start tls "$tls_pool" "$tls_tcp" --tls-cert server.pem --tls-key server.key \
  --tls-client-ca maru-ca.pem --tls-identity "CN=vllm-0=1000:1000" || exit 1

owner() {  # owner SERVER PATH -> "uid: N  gid: M"
  "$bin_ctl" stat "$2" --server "unix://$work/$1.sock" 2>&1 | grep -o 'uid: [0-9]*  gid: [0-9]*'
}
# A root client over Unix makes one private and one public chunk on each.
for s in plain tls; do
  "$client" "unix://$work/$s.sock" store-mode /t/secret 4096 600 + store /t/pub 4096 ||
    fail "setup on $s"
done

# --- plain TCP, no credentials: nobody, whatever it would assert -----------------
out=$("$client" "$plain_tcp" open-errno /t/secret 13 + load /t/pub 4096 "$plain_pool" \
  + store /anon 4096 2>&1) || fail "anonymous TCP caller: $out"
[ "$(owner plain /anon)" = "uid: 65534  gid: 65534" ] ||
  fail "anonymous TCP create owned by '$(owner plain /anon)'"

# --- a token: its uid; a wrong token: refused ------------------------------------
echo right-token > right
echo wrong-token > wrong
out=$(MARU_TOKEN_FILE=$work/right "$client" "$plain_tcp" open-errno /t/secret 13 \
  + store /by-token 4096 2>&1) || fail "token caller: $out"
[ "$(owner plain /by-token)" = "uid: 1001  gid: 1001" ] ||
  fail "token create owned by '$(owner plain /by-token)'"
out=$(MARU_TOKEN_FILE=$work/wrong "$client" "$plain_tcp" load /t/pub 4096 "$plain_pool" 2>&1)
rc=$?
[ $rc -ne 0 ] && grep -q "token refused" <<<"$out" && grep -q "Permission denied" <<<"$out" ||
  fail "wrong token: '$out' ($rc)"
out=$(MARU_TOKEN_FILE=$work/wrong "$bin_ctl" df --server "$plain_tcp" 2>&1)
rc=$?
[ $rc -ne 0 ] && grep -q "token refused" <<<"$out" || fail "maructl with a wrong token: '$out' ($rc)"

# --- mutual TLS: a mapped certificate is its uid ---------------------------------
tls_env=(MARU_TLS_CA=$work/maru-ca.pem MARU_TLS_CERT=$work/vllm.pem MARU_TLS_KEY=$work/vllm.key)
out=$(env "${tls_env[@]}" "$client" "$tls_tcp" open-errno /t/secret 13 \
  + load /t/pub 4096 "$tls_pool" + store /by-cert 4096 2>&1) || fail "TLS caller: $out"
[ "$(owner tls /by-cert)" = "uid: 1000  gid: 1000" ] ||
  fail "TLS create owned by '$(owner tls /by-cert)'"
# ... a certificate from another CA, no client certificate, no TLS: refused.
for case in stranger nocert; do
  if [ $case = stranger ]; then
    e=(MARU_TLS_CA=$work/maru-ca.pem MARU_TLS_CERT=$work/stranger.pem MARU_TLS_KEY=$work/stranger.key)
  else
    e=(MARU_TLS_CA=$work/maru-ca.pem)
  fi
  out=$(env "${e[@]}" MARU_TIMEOUT_MS=2000 "$client" "$tls_tcp" load /t/pub 4096 "$tls_pool" 2>&1)
  rc=$?
  [ $rc -ne 0 ] && grep -q "TLS handshake failed" <<<"$out" && grep -q "Permission denied" <<<"$out" ||
    fail "TLS $case: '$out' ($rc)"
done
out=$(MARU_TIMEOUT_MS=2000 "$client" "$tls_tcp" load /t/pub 4096 "$tls_pool" 2>&1) &&
  fail "plain client against the TLS port: '$out'"

# --- the fast lane over TCP with mutual TLS: off unless asked, then the ---------
# --- certificate's uid through a ticket -------------------------------------------
lane_count() {  # lane_count SERVER: requests served on its TCP fast lane
  "$bin_ctl" stats --server "unix://$work/$1.sock" | awk '$1=="FastLaneTcp"{n=$2} END{print n+0}'
}
[ "$(lane_count tls)" = 0 ] || fail "a TLS server offered the TCP fast lane by default"
"$bin_ctl" mkpool "$tls_lane_pool" --size 64M --mode 666 >/dev/null || fail "mkpool"
tls_lane_tcp=tcp://127.0.0.1:$((base + 2))
start tlslane "$tls_lane_pool" "$tls_lane_tcp" --tls-cert server.pem --tls-key server.key \
  --tls-client-ca maru-ca.pem --tls-identity "CN=vllm-0=1000:1000" --tcp-fast-lane on || exit 1
"$client" "unix://$work/tlslane.sock" store-mode /t/secret 4096 600 >/dev/null || fail "setup"
out=$(env "${tls_env[@]}" "$client" "$tls_lane_tcp" open-errno /t/secret 13 \
  + store /by-cert 4096 + load /by-cert 4096 "$tls_lane_pool" 2>&1) || fail "TLS lane caller: $out"
[ "$(owner tlslane /by-cert)" = "uid: 1000  gid: 1000" ] ||
  fail "TLS lane create owned by '$(owner tlslane /by-cert)'"
[ "$(lane_count tlslane)" -gt 0 ] || fail "a TLS client with --tcp-fast-lane on did not use it"

# --- a token file others may read: the server does not start --------------------
chmod 644 tokens
out=$("$bin_server" --pool "$plain_pool" --db "$work/bad.db" --listen "$plain_tcp" \
  --token-file "$work/tokens" 2>&1)
rc=$?
[ $rc -ne 0 ] && grep -q "0600" <<<"$out" || fail "server with a readable token file: '$out' ($rc)"

[ $failures -eq 0 ] && echo "tcp auth: all checks passed"
exit $((failures > 0))
