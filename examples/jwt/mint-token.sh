#!/bin/sh
# mint-token.sh SUBJECT PLAN [SECONDS]
#
# Prints a JWT for examples/plans-jwt.yaml: subject SUBJECT, claim plan PLAN,
# valid for SECONDS (default 3600), signed (EdDSA) with the DEMO key beside
# this script. With ANCHOR set in the environment (such as 15T09:00), the
# token also carries it as the billing_anchor claim: the day and time the
# client's month starts. Needs OpenSSL 3. For trying Sluice out only: the demo key is
# public, so these tokens prove nothing.
set -eu
[ $# -ge 2 ] || { echo "usage: $0 SUBJECT PLAN [SECONDS]" >&2; exit 2; }
key=$(dirname "$0")/DEMO-issuer.key
b64url() { openssl base64 -A | tr '+/' '-_' | tr -d '='; }
now=$(date +%s)
header=$(printf '{"alg":"EdDSA","typ":"JWT","kid":"demo-2026"}' | b64url)
anchor=""
[ -z "${ANCHOR:-}" ] || anchor=$(printf ',"billing_anchor":"%s"' "$ANCHOR")
claims=$(printf '{"iss":"https://auth.example.com/","aud":"api.example.com","sub":"%s","plan":"%s","iat":%d,"exp":%d%s}' \
	"$1" "$2" "$now" "$((now + ${3:-3600}))" "$anchor" | b64url)
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
printf '%s.%s' "$header" "$claims" >"$tmp"
sig=$(openssl pkeyutl -sign -inkey "$key" -rawin -in "$tmp" | b64url)
printf '%s.%s.%s\n' "$header" "$claims" "$sig"
