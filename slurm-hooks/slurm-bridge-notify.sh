#!/bin/bash
# slurm-bridge's hook for slurmctld: tells the bridge's operator that a job started
# (PrologSlurmctld) or ended (EpilogSlurmctld), so that it reads that one job at once instead of
# at its next poll. Install on the slurmctld host(s) (docs/configuration.md#slurm-hooks):
#
#   PrologSlurmctld=/etc/slurm/slurm-bridge-notify.sh
#   EpilogSlurmctld=/etc/slurm/slurm-bridge-notify.sh
#
# (slurm.conf takes several PrologSlurmctld and EpilogSlurmctld lines: a site's own scripts stay.)
# Its settings are KEY=VALUE lines in /etc/slurm/slurm-bridge-notify.conf (or
# $SLURM_BRIDGE_NOTIFY_CONF), readable by SlurmUser:
#
#   URL=http://slurm-bridge-operator-hook.slurm-bridge-system:8080/slurm/hook
#   TOKEN_FILE=/etc/slurm/slurm-bridge-hook.token   # the shared secret, mode 0600, owned by SlurmUser
#   PARTITIONS=                                     # only these partitions (comma-separated); empty: all
#   TRIES=3                                         # a standby operator answers 503: try again
#
# It always exits 0 at once: slurmctld cancels a job whose PrologSlurmctld fails (external jobs
# cannot be requeued), and the job stays CONFIGURING while the script runs. So the notice is sent
# by a detached child (its own session, so nothing waits for it and slurmctld's clean-up of the
# script's process group does not kill it), with a 2 s limit per try. A notice that is lost costs
# only time: the operator's polls find the same. The operator reads the job back from Slurm before
# it acts, so a notice is never trusted. HTTP needs nothing but bash (/dev/tcp); HTTPS needs curl.

conf=${SLURM_BRIDGE_NOTIFY_CONF:-/etc/slurm/slurm-bridge-notify.conf}
case ${SLURM_SCRIPT_CONTEXT:-} in
  prolog_slurmctld) event=started ;;
  epilog_slurmctld) event=ended ;;
  *) exit 0 ;;
esac
[[ ${SLURM_JOB_ID:-} =~ ^[0-9]+$ && -r $conf ]] || exit 0

URL= TOKEN_FILE=/etc/slurm/slurm-bridge-hook.token PARTITIONS= TRIES=3
while IFS='=' read -r key value; do  # KEY=VALUE lines only; never sourced
  value=${value%%#*}; value=${value//[[:space:]]/}
  case $key in URL | TOKEN_FILE | PARTITIONS | TRIES) printf -v "$key" '%s' "$value" ;; esac
done < "$conf"
[ -n "$URL" ] && [ -r "$TOKEN_FILE" ] || exit 0
if [ -n "$PARTITIONS" ] && [[ ",$PARTITIONS," != *",${SLURM_JOB_PARTITION:-},"* ]]; then exit 0; fi
[[ $TRIES =~ ^[1-9]$ ]] || TRIES=3

post() { # the HTTP status of one POST of $body with the token, or 000
  local token
  token=$(< "$TOKEN_FILE") || { echo 000; return; }
  if command -v curl > /dev/null; then
    curl -s -o /dev/null -w '%{http_code}' -m 2 -X POST -H "Authorization: Bearer $token" \
      -H 'Content-Type: application/json' --data "$body" "$URL" || echo 000
    return
  fi
  [[ $URL =~ ^http://([^/:]+)(:([0-9]+))?(/.*)?$ ]] || { echo 000; return; }
  local host=${BASH_REMATCH[1]} port=${BASH_REMATCH[3]:-80} path=${BASH_REMATCH[4]:-/} status=000
  timeout 2 bash -c 'exec 3<>"/dev/tcp/$1/$2" || exit 1
    printf "POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" \
      "$3" "$1" "$4" "${#5}" "$5" >&3
    read -r _ status _ <&3 && echo "$status"' _ "$host" "$port" "$path" "$token" "$body" 2> /dev/null || echo "$status"
}

notify() {
  local i status
  for ((i = 1; i <= TRIES; i++)); do
    status=$(post)
    case $status in 2??|4??) return ;; esac  # done, or refused for good (a wrong token: no retry)
    sleep 0.1
  done
}

body="{\"event\":\"$event\",\"jobId\":$SLURM_JOB_ID}"
export -f post notify
export body URL TOKEN_FILE TRIES
setsid bash -c notify < /dev/null > /dev/null 2>&1 &
exit 0
