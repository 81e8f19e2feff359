#!/bin/bash -p
# slurm-bridge's EpilogSlurmctld: the handoff (docs/colocation.md, "The handoff").
#
# Slurm frees an external job's CPUs the moment it ends the job, but the pod on them may still be
# shutting down (its grace period). When Slurm ends a bridge job on its own -- scancel by someone
# else, a node failure, a time limit or a preemption the bridge did not get ahead of -- this
# script reserves what the job held on each of its nodes, for SlurmUser only, so no native job
# starts there under the pod. The bridge deletes the reservation once the pod's containers have
# stopped; MAX_HOLD_SECONDS (below) bounds the hold when the bridge is away.
#
# Install on the slurmctld host (it runs there, as SlurmUser, for every job end):
#   install -o root -m 0755 slurm-bridge-handoff.sh   /etc/slurm/slurm-bridge-handoff.sh
#   install -o root -m 0644 slurm-bridge-handoff.conf /etc/slurm/slurm-bridge-handoff.conf
#   slurm.conf:  EpilogSlurmctld=/etc/slurm/slurm-bridge-handoff.sh
# SlurmUser must be allowed to create reservations (it is an operator of its own cluster).
#
# What it trusts (anything a job's user can set -- its name, comment, working directory, output
# paths, its environment -- is never trusted; `-p` above: no BASH_ENV, no functions from the
# environment; the working directory /tmp only makes a job a candidate for a provisional hold of
# PROVISIONAL_SECONDS at most, deleted once the job is read, milliseconds: "The provisional hold"):
#   the configuration file next to this script (<this script's directory>/slurm-bridge-handoff.conf),
#     owned by root (or by SlurmUser, who runs this script), a regular file, not writable by group
#     or others; KEY=VALUE lines, read, never sourced; anything else makes the script do nothing:
#       BRIDGE_IDS=<id>[,<id>...]   the bridges (their bridgeId) whose jobs it holds for
#       MAX_HOLD_SECONDS=<n>        how long a hold lasts at most (default 86400): the bridge deletes
#                                   it as soon as the pod's containers stopped
#       SLURM_BIN_DIR=<dir>         where scontrol is when not in /usr/bin, /bin
#   the job's AdminComment, which only an operator (the bridge's SlurmUser token) can set, read with
#     one `scontrol --json show job <id>` (its "admin_comment" key: JSON keeps every user-set string
#     on its key's line, escaped; in `show job -o` the job's name, submit line and working directory
#     come before AdminComment= and its comment and output paths after, any of them forged):
#       slurm-bridge:{"bridge":"<id>","handoff":"cores"|"node",...[,"released":true]}
#     "released": the bridge released the job itself after its pods stopped: nothing is held
#   slurmctld's own description of the allocation: SLURM_JOB_ID, SLURM_JOB_NODELIST,
#     SLURM_JOB_CPUS_PER_NODE ("2(x2),1"), SLURM_JOB_EXCLUSIVE (NO, NODE, MCS, USER)
# What it makes, one per node (a reservation's per-node CoreCnt list is refused by Slurm 26.05):
#   handoff-<job id>_<bridge id>_<node>   StartTime=now EndTime=now+MAX_HOLD_SECONDS  Users=<SlurmUser>
#     cores scope: CoreCnt=<the job's CPUs on that node> (the lowest free cores, not the job's own; no
#                  memory). On a node with several threads a core that holds more than the job had
#                  (a count of cores never falls short of the job's), up to the whole node below
#     node scope (whole-node, time-shared or exact-core jobs, any job Slurm calls exclusive, a
#                  marker without a scope): the whole node (Flags=IGNORE_JOBS: jobs running there go
#                  on; nothing new starts)
#     a count that does not fit (another job took the cores first) falls back to the node scope
# It always exits 0 (a failing EpilogSlurmctld is logged by slurmctld but changes nothing for an
# ended job) and returns within milliseconds: slurmctld runs it beside its scheduling.
# Log: one line per action to /var/log/slurm-bridge/handoff.log when that directory is writable,
# and why it did nothing, when it refused its configuration, to stderr too.
PATH=/usr/bin:/bin:/usr/sbin:/sbin
IFS=$' \t\n'

LOG_DIR=/var/log/slurm-bridge
PROVISIONAL_SECONDS=30   # a candidate's hold until its AdminComment is read (see "The provisional hold")
PREFIX='slurm-bridge:'
log() { [ -w "$LOG_DIR" ] && echo "$(date +%Y-%m-%dT%H:%M:%S.%N) job=${SLURM_JOB_ID:-?} $*" >> "$LOG_DIR/handoff.log"; }
refuse() { echo "slurm-bridge-handoff: $*: nothing held (docs/colocation.md, \"The handoff\")" >&2; log "$*: nothing held"; exit 0; }

# ---- the configuration file ----------------------------------------------------------------------
read_conf() { # sets bridge_ids (array), max_hold
  local conf owner mode line key value id
  case $0 in /*) conf="${0%/*}/slurm-bridge-handoff.conf" ;; *) refuse "started without an absolute path ($0)" ;; esac
  [ -e "$conf" ] || [ -L "$conf" ] || refuse "no configuration file $conf"
  [ ! -L "$conf" ] && [ -f "$conf" ] || refuse "$conf is not a regular file"
  read -r owner mode < <(stat -c '%u %a' -- "$conf" 2>/dev/null)
  [ "$owner" = 0 ] || [ "$owner" = "$(id -u)" ] || refuse "$conf is owned by uid ${owner:-?}, not root or $(id -un)"
  case $mode in [0-7][0-7][0-7] | [0-7][0-7][0-7][0-7]) ;; *) refuse "cannot read the mode of $conf" ;; esac
  (( (8#$mode & 8#022) == 0 )) || refuse "$conf is writable by group or others (mode $mode)"
  [ -r "$conf" ] || refuse "cannot read $conf"
  bridge_ids=() max_hold=86400
  local seen=" "
  while IFS= read -r line || [ -n "$line" ]; do
    line=${line%$'\r'}
    case $line in '' | '#'*) continue ;; *=*) ;; *) refuse "$conf: a line that is not KEY=VALUE: $line" ;; esac
    key=${line%%=*} value=${line#*=}
    case $seen in *" $key "*) refuse "$conf: $key twice" ;; esac
    seen+="$key "
    case $key in
      BRIDGE_IDS)
        [ -n "$value" ] || refuse "$conf: BRIDGE_IDS is empty"
        [[ $value =~ ^[^,]+(,[^,]+)*$ ]] || refuse "$conf: BRIDGE_IDS=$value: an empty id is not a bridgeId"
        IFS=, read -r -a bridge_ids <<< "$value"
        for id in "${bridge_ids[@]}"; do
          [[ $id =~ ^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$ ]] || refuse "$conf: BRIDGE_IDS: '$id' is not a bridgeId (a DNS label)"
        done ;;
      MAX_HOLD_SECONDS)
        [[ $value =~ ^[0-9]{1,9}$ ]] && (( 10#$value > 0 )) || refuse "$conf: MAX_HOLD_SECONDS=$value is not a number of seconds (1 to 999999999)"
        max_hold=$((10#$value)) ;;
      SLURM_BIN_DIR)
        [[ $value =~ ^/[A-Za-z0-9_./+-]*$ ]] && [ -d "$value" ] || refuse "$conf: SLURM_BIN_DIR=$value is not a directory"
        PATH="$value:$PATH" ;;
      *) refuse "$conf: unknown key $key (BRIDGE_IDS, MAX_HOLD_SECONDS, SLURM_BIN_DIR)" ;;
    esac
  done < "$conf"
  [ ${#bridge_ids[@]} -gt 0 ] || refuse "$conf: no BRIDGE_IDS"
}

# ---- the job's AdminComment -----------------------------------------------------------------------
marker() { # comment -> sets m_bridge, m_scope, m_released; fails for anything but the bridge's marker
  local c=$1 body pair key value
  local -a pairs
  m_bridge='' m_scope='' m_released=''
  case $c in "$PREFIX{"*'}') ;; *) return 1 ;; esac
  body=${c#"$PREFIX{"} body=${body%'}'}
  # JSON of keys and plain values: names of Kubernetes objects, uids, ids, true/false (json.dumps,
  # separators "," and ":"); anything else (spaces, escapes, nesting) is not the bridge's.
  [[ $body =~ ^[A-Za-z0-9_.:,\"-]*$ ]] || return 1
  local -A seen=()
  IFS=, read -r -a pairs <<< "$body"
  for pair in "${pairs[@]}"; do
    [[ $pair =~ ^\"([a-z_]+)\":(\"[A-Za-z0-9_.:-]*\"|true|false|[0-9]+)$ ]] || return 1
    key=${BASH_REMATCH[1]} value=${BASH_REMATCH[2]}
    [ -z "${seen[$key]:-}" ] || return 1
    seen[$key]=1
    case $key in
      bridge) m_bridge=${value//\"/} ;;
      handoff) m_scope=${value//\"/} ;;
      released) m_released=$value ;;
    esac
  done
  [ -n "$m_bridge" ]
}

listed() { local id; for id in "${bridge_ids[@]}"; do [ "$id" = "$1" ] && return 0; done; return 1; }

# ---- the reservations -----------------------------------------------------------------------------
# make NODE CPUS BRIDGE SCOPE SECONDS: one node's hold; sets made (the scope it got: a count that does
# not fit falls back to the whole node, "" when Slurm refused both)
make() {
  local name="handoff-${job}_$3_$1" what out out2
  made=''
  if [ "$4" = node ] || [ -z "$2" ] || [ "$2" = 0 ]; then what="Flags=IGNORE_JOBS"; else what="CoreCnt=$2"; fi
  if out=$(scontrol create reservation "ReservationName=$name" "Nodes=$1" $what StartTime=now \
    "EndTime=now+$5seconds" "Users=$me" 2>&1); then
    log "node=$1 $what hold<=$5s: $out"
    [ "$what" = Flags=IGNORE_JOBS ] && made=node || made=cores
    return
  fi
  if [ "$what" != Flags=IGNORE_JOBS ]; then
    if out2=$(scontrol create reservation "ReservationName=$name" "Nodes=$1" Flags=IGNORE_JOBS StartTime=now \
      "EndTime=now+$5seconds" "Users=$me" 2>&1); then made=node; fi
    log "node=$1 $what failed ($out); whole node instead: $out2"
  else
    log "node=$1 $what failed: $out"
  fi
}
# drop NODE BRIDGE: delete a provisional hold
drop() {
  local out
  if out=$(scontrol delete "ReservationName=handoff-${job}_$2_$1" 2>&1); then
    log "node=$1 provisional hold deleted"
  else
    log "node=$1 deleting the provisional hold failed ($out): it ends after ${PROVISIONAL_SECONDS}s"
  fi
}
# extend NODE BRIDGE: the provisional hold of a verified bridge job lasts up to the ceiling
extend() {
  local out
  if out=$(scontrol update "ReservationName=handoff-${job}_$2_$1" "EndTime=now+${max_hold}seconds" 2>&1); then
    log "node=$1 held, hold<=${max_hold}s"
  else
    log "node=$1 extending the provisional hold failed ($out): it ends after ${PROVISIONAL_SECONDS}s"
  fi
}

# ---- main -----------------------------------------------------------------------------------------
job=${SLURM_JOB_ID:-}
[[ $job =~ ^[0-9]+$ ]] || exit 0
[ -n "${SLURM_JOB_NODELIST:-}" ] || exit 0   # never allocated: nothing to hold
read_conf
me=$(id -un)

# SLURM_JOB_CPUS_PER_NODE in node order: "4,2(x3)" -> 4 2 2 2
cpus=()
for item in ${SLURM_JOB_CPUS_PER_NODE//,/ }; do
  n=${item%%(*} r=1
  case $item in *'(x'*')') r=${item#*(x} r=${r%)} ;; esac
  [[ $n =~ ^[0-9]+$ && $r =~ ^[0-9]+$ ]] || { cpus=(); break; }   # unreadable: the whole nodes
  for ((i = 0; i < r; i++)); do cpus+=("$n"); done
done
case $SLURM_JOB_NODELIST in   # one plain node name: no call (the provisional hold's time)
  *[][,\ ]*) mapfile -t nodes < <(scontrol show hostnames "$SLURM_JOB_NODELIST" 2>/dev/null) ;;
  *) nodes=("$SLURM_JOB_NODELIST") ;;
esac
[ ${#nodes[@]} -gt 0 ] || log "scontrol show hostnames $SLURM_JOB_NODELIST failed: nothing held"

# The provisional hold, before the job is read: Slurm frees the job's CPUs as it ends it and
# schedules at once, and a read of the job (tens of ms) loses that race. A candidate -- a job with
# the bridge's working directory (/tmp, slurm_bridge/slurm/bodies.py), which its user can set, so
# it says only "perhaps" -- is held at once for PROVISIONAL_SECONDS, under the first listed
# bridge's name, then kept (up to the ceiling) or deleted once its AdminComment is read: a forged
# candidate is held for milliseconds (the script's run), PROVISIONAL_SECONDS at most.
held=()
candidate() { [ "${SLURM_JOB_WORK_DIR:-}" = /tmp ]; }
if candidate; then
  pscope=cores
  case ${SLURM_JOB_EXCLUSIVE:-NO} in NO | '') ;; *) pscope=node ;; esac
  while read -r i got; do [ -z "$got" ] || held[i]=$got; done < <(
    for i in "${!nodes[@]}"; do
      { make "${nodes[$i]}" "${cpus[$i]:-}" "${bridge_ids[0]}" "$pscope" "$PROVISIONAL_SECONDS"; echo "$i $made"; } &
    done
    wait)
fi

# One read of the job (a heterogeneous job's components each have theirs). Its pretty-printed JSON
# has one key a line, and a string never spans lines (JSON escapes newlines): a line that is the
# "admin_comment" key is the job's AdminComment, only an operator's to set, whatever its user put
# into the other fields. Escaped quotes are the marker's; any other escape is not the bridge's.
if ! json=$(scontrol --json show job "$job" 2>/dev/null); then
  log "scontrol --json show job $job failed, nothing held${held[*]:+ but the provisional hold, ${PROVISIONAL_SECONDS}s} (does this Slurm have its JSON plugins, as slurmrestd needs?)"
  exit 0
fi
comments=()
while IFS= read -r line; do
  [[ $line =~ ^[[:space:]]*\"admin_comment\":\ \"(.*)\",?$ ]] || continue
  value=${BASH_REMATCH[1]//\\\"/\"}
  case $value in *\\*) continue ;; esac
  comments+=("$value")
done <<< "$json"
bridge='' scope=''
for line in "${comments[@]}"; do
  marker "$line" || continue
  listed "$m_bridge" || continue
  [ "$m_released" = true ] && continue
  [ -n "$bridge" ] || bridge=$m_bridge
  case $m_scope in cores) scope=${scope:-cores} ;; *) scope=node ;; esac
done
if [ -z "$bridge" ]; then
  case "${comments[*]}" in *"$PREFIX"*) log "not held: a bridge's job, released by it or of a bridge not listed" ;; esac
  for i in "${!held[@]}"; do drop "${nodes[$i]}" "${bridge_ids[0]}" & done
  wait
  exit 0
fi
case ${SLURM_JOB_EXCLUSIVE:-NO} in NO | '') ;; *) scope=node ;; esac

# A provisional hold of the right bridge and scope is kept (a whole node where cores were meant is
# kept too: the safe side). Another bridge's name: the new hold is made before the old one goes;
# cores where the whole node is meant (a job the bridge marked "node" that Slurm does not call
# exclusive): the same name, so the count goes first, milliseconds before the node is held.
for i in "${!nodes[@]}"; do
  got=${held[$i]:-}
  if [ "$bridge" = "${bridge_ids[0]}" ] && { [ "$got" = node ] || [ "$got" = "$scope" ]; }; then
    extend "${nodes[$i]}" "$bridge" &
  elif [ "$bridge" = "${bridge_ids[0]}" ] && [ -n "$got" ]; then
    { drop "${nodes[$i]}" "$bridge"; make "${nodes[$i]}" "${cpus[$i]:-}" "$bridge" "$scope" "$max_hold"; } &
  else
    { make "${nodes[$i]}" "${cpus[$i]:-}" "$bridge" "$scope" "$max_hold"
      [ -z "$got" ] || drop "${nodes[$i]}" "${bridge_ids[0]}"; } &
  fi
done
wait
exit 0
