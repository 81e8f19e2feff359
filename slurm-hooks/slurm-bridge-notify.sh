#!/bin/sh
# slurm-bridge's hook for slurmctld: tells the bridge's operator that a job started
# (PrologSlurmctld) or ended (EpilogSlurmctld), so that it reads that one job at once instead of
# at its next poll. Install on the slurmctld host(s) (docs/configuration.md#slurm-hooks):
#
#   PrologSlurmctld=/etc/slurm/slurm-bridge-notify.sh
#   EpilogSlurmctld=/etc/slurm/slurm-bridge-notify.sh
#
# (slurm.conf takes several PrologSlurmctld and EpilogSlurmctld lines: a site's own scripts stay.)
# With hybrid nodes it has no line of its own: the handoff script (slurm-bridge-handoff.sh) is the
# one PrologSlurmctld and EpilogSlurmctld and runs it at both (its NOTIFY).
# Its settings are KEY=VALUE lines in /etc/slurm/slurm-bridge-notify.conf (or
# $SLURM_BRIDGE_NOTIFY_CONF), readable by SlurmUser:
#
#   URL=http://slurm-bridge-operator-hook.slurm-bridge-system:8080/slurm/hook
#   TOKEN_FILE=/etc/slurm/slurm-bridge-hook.token   # the shared secret, mode 0600, owned by SlurmUser
#   PARTITIONS=                                     # only these partitions (comma-separated); empty: all
#   TRIES=3                                         # a standby operator answers 503: try again
#   LOG=/var/log/slurm-bridge/notify.log            # why it sent nothing, when it cannot sign (below)
#
# A start's notice also says where and when the job started and whose it is (its nodes, partition,
# start and end times, user, group, account and QOS, as slurmctld gives them to the script), and
# every notice is signed: an HMAC-SHA256 of its body with the shared secret, in an
# X-Slurm-Bridge-Signature header (computed with bash's builtins and sha256sum, or `openssl dgst`
# where coreutils' sha256sum is missing, so the secret is on no command line and never on the
# wire). The operator releases the pods of a signed start before its read of the job comes back
# (docs/configuration.md#slurm-hooks). A host with neither sends nothing: the script says why on
# stderr and in LOG (when its directory is writable), and the operator's polls find the job. It
# never sends the secret itself: the operator refuses such a notice.
#
# It always exits 0 at once: slurmctld cancels a job whose PrologSlurmctld fails (external jobs
# cannot be requeued), and the job stays CONFIGURING while the script runs. So the notice is sent
# by a background subshell in its own process group (so that nothing waits for it and slurmctld's
# clean-up of the script's process group does not kill it), at most 5 s in all. A notice that is
# lost costs only time: the operator's polls find the same. With curl (HTTPS too) the subshell runs
# curl; without it, bash alone speaks HTTP (/dev/tcp). The token never appears on a command line.
# Each job's start and end runs it: it starts no program but sha256sum (once for both of the
# signature's hashes; openssl twice) and curl, and for a job outside /tmp (not the bridge's), or one
# whose comment says the bridge needs no such notice (below), none, not even bash: a small POSIX
# shell (/bin/sh, dash on Debian) reads the file first and exits for such a job without starting
# bash, whose start alone costs several times its own; any other job it hands to bash, this same
# file (which skips the front: bash's options, $-, hold B).
case $- in *B*) ;; *)
  case ${SLURM_SCRIPT_CONTEXT:-} in prolog_slurmctld | epilog_slurmctld) ;; *) exit 0 ;; esac
  case ${SLURM_JOB_ID:-} in '' | *[!0-9]*) exit 0 ;; esac
  [ "${SLURM_JOB_WORK_DIR:-/tmp}" = /tmp ] || exit 0   # the tests below, in the same order
  case ${SLURM_JOB_COMMENT:-} in
    slurm-bridge:*'"notify":"none"'*) exit 0 ;;
    slurm-bridge:*'"notify":"ended"'*) [ "$SLURM_SCRIPT_CONTEXT" = epilog_slurmctld ] || exit 0 ;;
  esac
  exec /bin/bash -- "$0" ;;
esac

conf=${SLURM_BRIDGE_NOTIFY_CONF:-/etc/slurm/slurm-bridge-notify.conf}
case ${SLURM_SCRIPT_CONTEXT:-} in
  prolog_slurmctld) event=started ;;
  epilog_slurmctld) event=ended ;;
  *) exit 0 ;;
esac
[[ ${SLURM_JOB_ID:-} =~ ^[0-9]+$ && -r $conf ]] || exit 0
# Only the bridge's jobs are told of: their working directory is /tmp (slurm_bridge/slurm/bodies.py).
# A job's user sets it, so a native job in /tmp is told of too (the operator ignores another's job),
# and a bridge job moved elsewhere by its user only waits for the next poll. A native job elsewhere
# costs slurmctld's host this test and nothing more (no signature, no sender). Unset: told.
[ "${SLURM_JOB_WORK_DIR:-/tmp}" = /tmp ] || exit 0
# What the bridge asks to be told of the job, in its comment (slurm_bridge/names/slurm.py):
# "ended", only its end (allocated inside the bridge's call, whose answer said it started);
# "none", nothing (the bridge ends it itself). A job's user can set its comment too, and so only
# makes their own pods wait for the operator's next poll.
case ${SLURM_JOB_COMMENT:-} in
  slurm-bridge:*'"notify":"none"'*) exit 0 ;;
  slurm-bridge:*'"notify":"ended"'*) [ "$event" = ended ] || exit 0 ;;
esac

URL= TOKEN_FILE=/etc/slurm/slurm-bridge-hook.token PARTITIONS= TRIES=3 LOG=/var/log/slurm-bridge/notify.log
while IFS='=' read -r key value; do  # KEY=VALUE lines only; never sourced
  value=${value%%#*}; value=${value//[[:space:]]/}
  case $key in URL | TOKEN_FILE | PARTITIONS | TRIES | LOG) printf -v "$key" '%s' "$value" ;; esac
done < "$conf"
[ -n "$URL" ] && [ -r "$TOKEN_FILE" ] || exit 0
if [ -n "$PARTITIONS" ] && [[ ",$PARTITIONS," != *",${SLURM_JOB_PARTITION:-},"* ]]; then exit 0; fi
# What hashes the signature (bash has no SHA-256): coreutils' sha256sum, else openssl. Neither: the
# notice is not sent (the secret itself never is), and the script says so where someone looks.
if command -v sha256sum > /dev/null; then hasher=(sha256sum)
elif command -v openssl > /dev/null; then hasher=(openssl dgst -sha256 -r)
else
  printf -v stamp '%(%Y-%m-%dT%H:%M:%S)T' -1
  said="slurm-bridge-notify: job $SLURM_JOB_ID $event: not sent: neither sha256sum nor openssl is on PATH ($PATH) to sign the notice (docs/configuration.md#slurm-hooks)"
  printf '%s\n' "$said" >&2
  [ -n "$LOG" ] && [ -w "${LOG%/*}" ] && printf '%s %s\n' "$stamp" "$said" >> "$LOG"
  exit 0
fi
[[ $TRIES =~ ^[1-9]$ ]] || TRIES=3
printf -v now '%(%s)T' -1
body="{\"event\":\"$event\",\"jobId\":$SLURM_JOB_ID,\"time\":$now"
# Where and when it started, and whose it is, as slurmctld says, each in the characters its kind of
# name may hold (else left out: the operator reads the job).
hostlist='^[][A-Za-z0-9._,-]+$' name='^[A-Za-z0-9._@-]+$' number='^(0|[1-9][0-9]{0,9})$'
if [ "$event" = started ] && [[ ${SLURM_JOB_NODELIST:-} =~ $hostlist && ${SLURM_JOB_PARTITION:-} =~ $name ]]; then
  [[ ${SLURM_JOB_START_TIME:-} =~ ^[1-9][0-9]*$ ]] && start=$SLURM_JOB_START_TIME || start=$now
  body+=",\"nodes\":\"$SLURM_JOB_NODELIST\",\"partition\":\"$SLURM_JOB_PARTITION\",\"startTime\":$start"
  [[ ${SLURM_JOB_END_TIME:-} =~ ^[1-9][0-9]*$ ]] && body+=",\"endTime\":$SLURM_JOB_END_TIME"
  if [[ ${SLURM_JOB_USER:-} =~ $name && ${SLURM_JOB_UID:-} =~ $number && ${SLURM_JOB_GID:-} =~ $number
    && ${SLURM_JOB_GROUP:-} =~ $name && ${SLURM_JOB_ACCOUNT:-} =~ $name && ${SLURM_JOB_QOS:-} =~ $name ]]; then
    body+=",\"user\":\"$SLURM_JOB_USER\",\"uid\":$SLURM_JOB_UID,\"group\":\"$SLURM_JOB_GROUP\",\"gid\":$SLURM_JOB_GID"
    body+=",\"account\":\"$SLURM_JOB_ACCOUNT\",\"qos\":\"$SLURM_JOB_QOS\""
  fi
fi
body+="}"

# sha256_of VAR FORMAT ARGS...: VAR is set to the SHA-256 (hex) of what `printf FORMAT ARGS` writes.
# One process, the hasher as a coprocess fed straight from this shell: a command substitution around
# a pipeline started two more (a third of the signature's cost). Both print the hex digest first.
sha256_of() {
  local -n sum_=$1
  local r w pid line
  shift
  coproc "${hasher[@]}" 2> /dev/null || return 1
  pid=$COPROC_PID w=${COPROC[1]}
  exec {r}<&"${COPROC[0]}"   # a copy: bash closes the coprocess's own fds when it reaps it
  printf "$@" >&"$w"
  exec {w}>&-
  IFS= read -r line <&"$r"
  exec {r}<&-
  wait "$pid" 2> /dev/null
  [[ $line =~ ^([0-9a-f]{64})\  ]] || return 1
  sum_=${BASH_REMATCH[1]}
}

# hmac_one IPAD OPAD BODY (the pads as \x escapes): sets outer to the HMAC's hex, both hashes from
# one sha256sum: "sha256sum - /dev/fd/4", its stdin the inner hash's input and fd 4 a pipe this
# shell writes the outer's into once the inner sum is back (coreutils writes each file's sum as it
# is done). One hasher process instead of two; the pipe is a process substitution's (a fork, no
# program). Fails (the caller hashes twice instead) on anything else, within 2 s.
hmac_one() {
  local p r w pid line inner i
  [ "${hasher[0]}" = sha256sum ] || return 1
  exec {p}<> <(:) || return 1
  coproc { exec 4< "/dev/fd/$p" {p}>&-; exec "${hasher[@]}" - /dev/fd/4; } 2> /dev/null
  pid=$COPROC_PID w=${COPROC[1]}
  exec {r}<&"${COPROC[0]}"   # a copy: bash closes the coprocess's own fds when it reaps it
  printf '%b%s' "$1" "$3" >&"$w"
  exec {w}>&-
  IFS= read -r -t 2 line <&"$r" || line=''
  if [[ $line =~ ^([0-9a-f]{64})\  ]]; then
    inner=${BASH_REMATCH[1]}
    escaped inner "$inner"
    printf '%b' "$2$inner" >&"$p"
  fi
  exec {p}>&-
  [ -z "$inner" ] || IFS= read -r -t 2 line <&"$r" || line=''
  exec {r}<&-
  wait "$pid" 2> /dev/null
  [ -n "$inner" ] && [[ $line =~ ^([0-9a-f]{64})\  ]] || return 1
  outer=${BASH_REMATCH[1]}
}

# escaped VAR HEX: VAR is set to HEX as printf's \x escapes, two digits each (no subshell)
escaped() {
  local -n out_=$1
  local hex=$2 i
  if shopt -q patsub_replacement 2> /dev/null; then out_=${hex//??/\\x&}   # bash 5.2: & is the match
  else out_=''; for ((i = 0; i < ${#hex}; i += 2)); do out_+="\\x${hex:i:2}"; done; fi
}

# auth_header TOKEN_FILE BODY: sets auth to the header line that authenticates the notice, from the
# secret's first line (spaces around it left out): HMAC-SHA256 (RFC 2104) of the body, with
# builtins and the hasher only. The pads are the key XOR 0x36.. and 0x5c.., 8 bytes at a time
# (bash's integers have 64 bits).
auth_header() {
  local LC_ALL=C key hex='' i c ipad='' opad='' inner outer=''
  local -a chars=()
  IFS= read -r key < "$1" || [ -n "$key" ] || return 1
  key=${key#"${key%%[![:space:]]*}"}; key=${key%"${key##*[![:space:]]}"}
  [ -n "$key" ] || return 1
  if ((${#key} > 64)); then sha256_of hex '%s' "$key" || return 1
  else for ((i = 0; i < ${#key}; i++)); do chars+=("'${key:i:1}"); done; printf -v hex '%02x' "${chars[@]}"; fi
  while ((${#hex} < 128)); do hex+=0000000000000000; done
  hex=${hex:0:128}
  for ((i = 0; i < 128; i += 16)); do
    printf -v c '%016x' $((16#${hex:i:16} ^ 0x3636363636363636)); ipad+=$c
    printf -v c '%016x' $((16#${hex:i:16} ^ 0x5c5c5c5c5c5c5c5c)); opad+=$c
  done
  escaped ipad "$ipad"
  escaped opad "$opad"
  if ! hmac_one "$ipad" "$opad" "$2"; then
    sha256_of inner '%b%s' "$ipad" "$2" || return 1
    escaped inner "$inner"
    sha256_of outer '%b' "$opad$inner" || return 1
  fi
  auth="X-Slurm-Bridge-Signature: sha256=$outer"
}

# The notice is sent by a background subshell of this shell (a fork, no new program): with job
# control on (set -m) it is its own process group from the fork on, in parent and child alike,
# so slurmctld's clean-up of the script's process group, as soon as the script exits, spares it
# (a child that had not yet left the group died with it: seen on Slurm 26.05.5 with setsid, when
# most notices were lost). Nothing waits for it; it reads nothing from slurmctld's pipes.
set -m
if command -v curl > /dev/null; then
  # curl tries again on a 503 (a standby) or a dropped connection, 2 s at most a try; the header
  # comes from stdin.
  (
    exec > /dev/null 2>&1
    auth_header "$TOKEN_FILE" "$body" || exit 0   # nothing is sent that could not be authenticated
    printf '%s\n' "$auth" |
      curl -s -o /dev/null -m 2 --retry "$((TRIES - 1))" --retry-delay 0 -X POST -H @- \
        -H "Content-Type: application/json" --data "$body" "$URL"
  ) < /dev/null &
  exit 0
fi

[[ $URL =~ ^http://([^/:]+)(:([0-9]+))?(/.*)?$ ]] || exit 0
host=${BASH_REMATCH[1]} port=${BASH_REMATCH[3]:-80} path=${BASH_REMATCH[4]:-/}
# bash alone: connect, send, read the status line; a 2xx or 4xx ends it (a wrong secret is not
# tried again), anything else is tried again after 0.1 s. A watchdog (a read that times out: no
# program either) ends the whole group after 5 s, should a connect hang.
(
  exec > /dev/null 2>&1
  auth_header "$TOKEN_FILE" "$body" || exit 0
  { read -r -t 5 _ <> <(:); kill -KILL 0; } &
  watchdog=$!
  for ((i = 1; i <= TRIES; i++)); do
    status=000
    if exec 3<> "/dev/tcp/$host/$port"; then
      printf 'POST %s HTTP/1.1\r\nHost: %s\r\n%s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' \
        "$path" "$host" "$auth" "${#body}" "$body" >&3
      read -r -t 2 _ status _ <&3 || status=000
      exec 3>&-
    fi
    case $status in 2??|4??) break ;; esac
    read -r -t 0.1 _ <> <(:)
  done
  kill "$watchdog"
) < /dev/null &
exit 0
