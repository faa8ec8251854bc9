#!/bin/sh
# Gateway comparison: nginx with limit_req, sluice serve (memory store),
# the plain Go reverse proxy sluice runs, nginx with auth_request to
# Sluice's forward-auth endpoint, and the baselines that separate the costs,
# all in front of the same upstream, driven by wrk with the client mix of
# clients.lua, interleaved over ROUNDS rounds. Run it on a quiet machine:
# the ratios of one run are what it reports.
#
# Usage: bench/gateway/compare.sh [ROUNDS] [DURATION]   (from the repository root)
# With BASE=REV (a commit, such as main), sluice serve built from REV runs
# beside as sluice-base, for before and after in one run.
#
# Targets (CPU per request counts every process of the target, never the
# upstream or wrk):
#   upstream        the upstream alone: a net/http server answering a fixed
#                   JSON body, the floor of any Go HTTP server here
#   nginx           nginx proxying, no limit: the floor of nginx's proxying
#   nginx-limit     nginx with limit_req by API key and by client address
#                   (the quickstart's search and per-ip rules)
#   proxy           sluice's reverse proxy without the limiter
#   sluice          sluice serve on the memory store, the quickstart's rules
#   nginx-allow     nginx with auth_request to a Go endpoint that answers
#                   200 at once: the subrequest's cost without a decision
#   nginx-fa        nginx with auth_request to sluice's forward-auth
#                   endpoint (the quickstart's rules); CPU is nginx's and
#                   sluice's together, and sluice's alone (fa_us)
set -eu
ROUNDS=${1:-3}
DUR=${2:-10s}
for tool in wrk go; do
  command -v $tool >/dev/null || { echo "compare.sh: $tool not found (Debian: apt-get install wrk)" >&2; exit 1; }
done
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$NGINX" ] || { echo "compare.sh: nginx not found (Debian: apt-get install nginx-light)" >&2; exit 1; }
tmp=$(mktemp -d)
pids=""
cleanup() { [ -z "$pids" ] || kill $pids 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'exit 1' INT TERM
go build -o "$tmp/sluice" ./cmd/sluice
if [ -n "${BASE:-}" ]; then
  mkdir "$tmp/base"
  git archive "$BASE" | tar -x -C "$tmp/base"
  (cd "$tmp/base" && go build -o "$tmp/sluice-base" ./cmd/sluice)
fi
(cd bench && go build -o "$tmp/gw" ./gateway)

UP=127.0.0.1:18081
"$tmp/gw" -role upstream -listen $UP & pids="$pids $!"; pid_upstream=$!
"$tmp/gw" -role proxy -listen 127.0.0.1:18082 -upstream http://$UP 2>/dev/null & pids="$pids $!"; pid_proxy=$!
"$tmp/gw" -role allow -listen 127.0.0.1:18087 & pids="$pids $!"; pid_allow=$!

# sluice serve with the quickstart's rules, believing 127.0.0.1's
# X-Forwarded-For, so that every request of clients.lua is another client.
sed -e "s|listen: 127.0.0.1:8080.*|listen: 127.0.0.1:18083|" \
    -e "s|admin: 127.0.0.1:9090.*|admin: 127.0.0.1:19083|" \
    -e "s|^upstream: .*|upstream: http://$UP|" \
    -e "s|trusted_proxies: \[\].*|trusted_proxies: [127.0.0.1/32]|" examples/quickstart.yaml > "$tmp/sluice.yaml"
"$tmp/sluice" serve --config "$tmp/sluice.yaml" 2>"$tmp/sluice.log" & pids="$pids $!"; pid_sluice=$!
if [ -n "${BASE:-}" ]; then
  sed -e "s|18083|18085|; s|19083|19085|" "$tmp/sluice.yaml" > "$tmp/base.yaml"
  "$tmp/sluice-base" serve --config "$tmp/base.yaml" 2>"$tmp/base.log" & pids="$pids $!"; pid_base=$!
fi
# The same rules behind forward-auth, for nginx's auth_request.
sed -e "s|listen: 127.0.0.1:8080.*|forward_auth: { listen: 127.0.0.1:18086, trusted_proxies: [127.0.0.1] }|" \
    -e "s|admin: 127.0.0.1:9090.*|admin: 127.0.0.1:19086|" \
    -e "/^upstream: /d" \
    -e "s|trusted_proxies: \[\].*|trusted_proxies: [127.0.0.1/32]|" examples/quickstart.yaml > "$tmp/fa.yaml"
"$tmp/sluice" serve --config "$tmp/fa.yaml" 2>"$tmp/fa.log" & pids="$pids $!"; pid_fa=$!

# nginx: one configuration, a server per target. As many workers as
# cores, keep-alive to the upstream and to the auth endpoints, the client's
# address from X-Forwarded-For as Sluice believes it.
mkdir -p "$tmp/nginx"
cat > "$tmp/nginx/nginx.conf" <<NGINX
worker_processes auto;
pid nginx.pid;
error_log stderr warn;
events { worker_connections 4096; }
http {
	access_log off;
	client_body_temp_path client_body_temp;
	proxy_temp_path proxy_temp;
	fastcgi_temp_path fastcgi_temp;
	uwsgi_temp_path uwsgi_temp;
	scgi_temp_path scgi_temp;
	set_real_ip_from 127.0.0.1;
	real_ip_header X-Forwarded-For;
	# The quickstart's search rule (20 per 10 s, burst 40, by API key) and
	# per-ip rule (1000 an hour, by client address).
	limit_req_zone \$http_x_api_key zone=search:64m rate=2r/s;
	limit_req_zone \$binary_remote_addr zone=perip:64m rate=17r/m;
	upstream api { server $UP; keepalive 64; }
	upstream sluice_fa { server 127.0.0.1:18086; keepalive 64; }
	upstream allow { server 127.0.0.1:18087; keepalive 64; }
	proxy_http_version 1.1;
	proxy_set_header Connection "";
	proxy_set_header Host \$host;
	proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
	server {
		listen 127.0.0.1:18090;
		location / { proxy_pass http://api; }
	}
	server {
		listen 127.0.0.1:18091;
		location / {
			limit_req zone=search burst=40 nodelay;
			limit_req zone=perip burst=1000 nodelay;
			proxy_pass http://api;
		}
	}
	# auth_request as examples/nginx/nginx.conf has it, less the headers
	# copied back; the subrequest carries the client's X-Forwarded-For.
	server {
		listen 127.0.0.1:18092;
		location / { auth_request /.sluice; proxy_pass http://api; }
		location = /.sluice {
			internal;
			proxy_pass http://sluice_fa/auth;
			proxy_pass_request_body off;
			# A location's own proxy_set_header drops the inherited ones.
			proxy_set_header Connection "";
			proxy_set_header Content-Length "";
			proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
			proxy_set_header X-Forwarded-Method \$request_method;
			proxy_set_header X-Forwarded-Uri \$request_uri;
			proxy_set_header X-Forwarded-Host \$host;
			proxy_set_header X-Forwarded-Proto \$scheme;
		}
	}
	server {
		listen 127.0.0.1:18093;
		location / { auth_request /.allow; proxy_pass http://api; }
		location = /.allow {
			internal;
			proxy_pass http://allow/auth;
			proxy_pass_request_body off;
			proxy_set_header Connection "";
			proxy_set_header Content-Length "";
		}
	}
}
NGINX
"$NGINX" -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" -e stderr -g "daemon off;" 2>"$tmp/nginx.log" & pids="$pids $!"; pid_nginx=$!
sleep 2
nginx_pids() { echo "$pid_nginx $(pgrep -P $pid_nginx | tr '\n' ' ')"; }

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; $(date -u +%F); commit $(git rev-parse --short HEAD); $("$NGINX" -v 2>&1); $(go version | cut -d' ' -f3)"
echo "command: ${BASE:+BASE=$BASE }bench/gateway/compare.sh $ROUNDS $DUR  (wrk -t1 -c64 -d$DUR --latency -s bench/gateway/clients.lua)"
targets="upstream:18081 nginx:18090 nginx-limit:18091 proxy:18082 sluice:18083 nginx-allow:18093 nginx-fa:18092"
[ -z "${BASE:-}" ] || targets="$targets sluice-base:18085"
for t in $targets; do
  wrk -t1 -c64 -d2s -s bench/gateway/clients.lua "http://127.0.0.1:${t#*:}/" >/dev/null # warm-up
done
# cpu PID...: the processes' CPU time so far, in clock ticks.
cpu() { for p in "$@"; do awk '{print $14 + $15}' "/proc/$p/stat"; done | awk '{s += $1} END {print s}'; }
for r in $(seq "$ROUNDS"); do
  for t in $targets; do
    name=${t%%:*}; port=${t#*:}
    case $name in
      upstream) procs=$pid_upstream ;;
      proxy) procs=$pid_proxy ;;
      sluice) procs=$pid_sluice ;;
      sluice-base) procs=$pid_base ;;
      nginx|nginx-limit) procs=$(nginx_pids) ;;
      nginx-allow) procs="$(nginx_pids) $pid_allow" ;;
      nginx-fa) procs="$(nginx_pids) $pid_fa" ;;
    esac
    c0=$(cpu $procs); f0=$(cpu $pid_fa); l0=$(awk '{print $1}' /proc/loadavg)
    out=$(wrk -t1 -c64 -d"$DUR" --latency -s bench/gateway/clients.lua "http://127.0.0.1:$port/")
    c1=$(cpu $procs); f1=$(cpu $pid_fa)
    n=$(echo "$out" | awk '/requests in/ {print $1}')
    rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
    p50=$(echo "$out" | awk '$1=="50%" {print $2}')
    p99=$(echo "$out" | awk '$1=="99%" {print $2}')
    non2xx=$(echo "$out" | awk '/Non-2xx/ {print $5}')
    hz=$(getconf CLK_TCK)
    us=$(awk -v c="$((c1 - c0))" -v n="$n" -v hz="$hz" 'BEGIN {printf "%.1f", c * 1e6 / hz / n}')
    extra=""
    if [ "$name" = nginx-fa ]; then
      extra=" fa_us=$(awk -v c="$((f1 - f0))" -v n="$n" -v hz="$hz" 'BEGIN {printf "%.1f", c * 1e6 / hz / n}')"
    fi
    echo "round $r $name rps=$rps p50=$p50 p99=$p99 non2xx=${non2xx:-0} cpu_us_per_req=$us$extra load=$l0"
  done
done
