#!/usr/bin/env bash
# A real Prometheus server scraping the process bridge of hack/bridge.sh on 127.0.0.1: the
# operator's health port, the extender's health port and the webhook's HTTPS port (with the
# bridge's CA), every second, so tests can query what the bridge counted (tests/e2e/test_metrics.py).
#
#   hack/prometheus.sh up      install Debian's prometheus package if missing, write the config, start
#   hack/prometheus.sh down    stop the server (its data goes with it)
#   hack/prometheus.sh url     print the server's URL
#
# It listens on 127.0.0.1:$SB_PROMETHEUS_PORT only; the scrape interval is $SB_SCRAPE_INTERVAL.
. "$(dirname "$0")/lib.sh"
: "${SB_SCRAPE_INTERVAL:=1s}"
PROM_DIR="$STATE_DIR/prometheus"
URL="http://127.0.0.1:$SB_PROMETHEUS_PORT"

install_prometheus() {
  command -v prometheus >/dev/null 2>&1 && return 0
  # The package's own service must not start (it would listen on every address): a policy-rc.d
  # that refuses starts, unless the machine has one; and no recommends (node exporter, another daemon).
  local policy=/usr/sbin/policy-rc.d made=""
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod 755 "$policy" && made=1
  fi
  SB_APT_INSTALL_FLAGS=--no-install-recommends ensure_apt prometheus || { [ -z "$made" ] || rm -f "$policy"; exit 1; }
  [ -z "$made" ] || rm -f "$policy"
  command -v prometheus >/dev/null 2>&1 || die "the prometheus package is installed but its binary is not on PATH"
}

write_config() {
  mkdir -p "$PROM_DIR"
  cat > "$PROM_DIR/prometheus.yml" <<CFG
# Written by hack/prometheus.sh: the process bridge of hack/bridge.sh.
global:
  scrape_interval: $SB_SCRAPE_INTERVAL
  scrape_timeout: $SB_SCRAPE_INTERVAL
  evaluation_interval: $SB_SCRAPE_INTERVAL
scrape_configs:
  - job_name: slurm-bridge-operator
    static_configs: [{targets: ["127.0.0.1:$SB_OPERATOR_PORT"]}]
  - job_name: slurm-bridge-extender
    static_configs: [{targets: ["127.0.0.1:$SB_EXTENDER_HEALTH_PORT"]}]
  - job_name: slurm-bridge-webhook
    scheme: https
    tls_config: {ca_file: "$STATE_DIR/bridge/tls/ca.crt"}
    static_configs: [{targets: ["127.0.0.1:$SB_WEBHOOK_PORT"]}]
CFG
}

cmd_up() {
  install_prometheus
  write_config
  if alive prometheus; then
    kill -HUP "$(pid_of prometheus)"  # reload the config
  else
    check_port prometheus "$SB_PROMETHEUS_PORT" SB_PROMETHEUS_PORT
    rm -rf "$PROM_DIR/data"
    start prometheus prometheus --config.file="$PROM_DIR/prometheus.yml" --storage.tsdb.path="$PROM_DIR/data" \
      --storage.tsdb.retention.time=1d --web.listen-address="127.0.0.1:$SB_PROMETHEUS_PORT" --log.level=warn
  fi
  wait_ready prometheus "$SB_READY_TIMEOUT" curl -sf "$URL/-/ready"
  log "prometheus up: $URL (scraping the bridge every $SB_SCRAPE_INTERVAL)"
}

case "${1:-}" in
  up) cmd_up ;;
  down) stop prometheus; log "prometheus stopped" ;;
  url) echo "$URL" ;;
  *) die "usage: hack/prometheus.sh up|down|url" ;;
esac
