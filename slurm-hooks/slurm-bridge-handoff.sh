#!/bin/sh
# slurm-bridge's handoff (docs/colocation.md, "The handoff"): slurmctld's EpilogSlurmctld and
# PrologSlurmctld, one script for both (SLURM_SCRIPT_CONTEXT says which).
#
# Slurm frees an external job's CPUs the moment it ends the job, but the pod on them may still be
# shutting down (its grace period). When Slurm ends a bridge job on its own -- scancel by someone
# else, a node failure, a time limit or a preemption the bridge did not get ahead of -- the
# epilog reserves what the job held on each of its nodes, for SlurmUser only, so no native job
# starts there under the pod. The bridge deletes the reservation once the pod's containers have
# stopped; MAX_HOLD_SECONDS (below) bounds the hold when the bridge is away.
# slurmctld schedules at the job's end, before any epilog can act: a waiting job can be given the
# pod's CPUs first (tens of milliseconds). The prolog closes that race: a job that starts on a node
# while a handoff there is unfinished (the epilog of a job that ended on it still running) or
# overbooked (its CPUs in use plus those held for a stopping pod exceed the node) waits, in
# CONFIGURING, before anything of it is launched, until the hold is released, no bridge's handoff
# drain is on its nodes, and they answer slurmctld again (a lifted drain makes Slurm ping a node;
# "The prolog").
#
# Install on the slurmctld host (it runs there, as SlurmUser, for every job start and end):
#   install -o root -m 0755 slurm-bridge-handoff.sh   /etc/slurm/slurm-bridge-handoff.sh
#   install -o root -m 0644 slurm-bridge-handoff.conf /etc/slurm/slurm-bridge-handoff.conf
#   install -d -o <SlurmUser> -m 0755 /var/spool/slurm-bridge      (STATE_DIR)
#   slurm.conf:  EpilogSlurmctld=/etc/slurm/slurm-bridge-handoff.sh
#                PrologSlurmctld=/etc/slurm/slurm-bridge-handoff.sh
# (the bridge's notify hook is no line of its own then: this script runs it, NOTIFY below)
# SlurmUser must be allowed to create reservations (it is an operator of its own cluster). /bin/sh
# reads the file first (the front, below: a job on no guarded node starts no bash) and /bin/bash
# does the rest: both must be there.
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
#       STATE_DIR=<dir>             where the epilog notes that it finished (default
#                                   /var/spool/slurm-bridge): SlurmUser's or root's, not writable by
#                                   group or others; without it the prolog waits PROVISIONAL_SECONDS
#                                   after every job end on its nodes instead
#       NODES=<hostlist>            the nodes the handoff guards (the epilog holds, the prolog waits
#                                   only there): those where pods and native jobs share (slurmd
#                                   beside a kubelet); default: every node
#       PROLOG_WAIT_SECONDS=<n>     the longest a job waits in the prolog (default 900: more than the
#                                   longest grace period the bridge lets a pod ask for); then the
#                                   prolog fails, and Slurm requeues the job (a batch job) or ends it
#       NOTIFY=<path>               a hook to run at every job's start and end (the bridge's notify
#                                   hook, slurm-bridge-notify.sh): the prolog runs it first, the
#                                   epilog last (once its holds are made). This script must be the
#                                   only PrologSlurmctld, as Slurm 26.05 ends a job's configuration
#                                   when the first of several ends, and runs it at the end too, so
#                                   that slurmctld starts one script a job's start and one its end
#                                   (each costs its host milliseconds of CPU). Root's (or SlurmUser's),
#                                   not writable by group or others (else it is not run); its exit
#                                   status is ignored. Neither runs it for a job whose comment says
#                                   the bridge needs no notice (slurm-bridge:{..."notify":"none"}),
#                                   nor the prolog for one whose start it knows ("notify":"ended")
#   the job's AdminComment, which only an operator (the bridge's SlurmUser token) can set, read with
#     one `scontrol --json show job <id>` (its "admin_comment" key: JSON keeps every user-set string
#     on its key's line, escaped; in `show job -o` the job's name, submit line and working directory
#     come before AdminComment= and its comment and output paths after, any of them forged):
#       slurm-bridge:{"bridge":"<id>","handoff":"cores"|"node",...[,"released":true]}
#     "released": the bridge released the job itself after its pods stopped: nothing is held
#   slurmctld's own description of the allocation: SLURM_JOB_ID, SLURM_JOB_NODELIST,
#     SLURM_JOB_CPUS_PER_NODE ("2(x2),1"), SLURM_JOB_EXCLUSIVE (NO, NODE, MCS, USER)
#   in the prolog: the reservations (only an operator names one), the nodes' CPU counts and states,
#     the states and end times of the jobs noted on the job's nodes (STATE_DIR/<node>@<id>.run, the
#     prolog's own notes; without STATE_DIR, the ended jobs of the whole job table on those nodes),
#     and the job's flags (EXTERNAL_JOB:
#     a bridge's job launches nothing, and Kubernetes keeps a new pod off a stopping pod's
#     resources itself): nothing a job's user sets
# What the epilog makes, one per node (a reservation's per-node CoreCnt list is refused by Slurm 26.05):
#   handoff-<job id>_<bridge id>_<node>   StartTime=now EndTime=now+MAX_HOLD_SECONDS  Users=<SlurmUser>
#     cores scope: CoreCnt=<the job's CPUs on that node> (the lowest free cores, not the job's own; no
#                  memory). On a node with several threads a core that holds more than the job had
#                  (a count of cores never falls short of the job's), up to the whole node below
#     node scope (whole-node, time-shared or exact-core jobs, any job Slurm calls exclusive, a
#                  marker without a scope): the whole node (Flags=IGNORE_JOBS: jobs running there go
#                  on; nothing new starts)
#     a count that does not fit (another job took the cores first) falls back to the node scope
#   and, once done, STATE_DIR/<job id>.done (the prolog's sign that this job's handoff is decided),
#   removing the job's STATE_DIR/<node>@<job id>.run notes, which its prolog wrote
# The epilog always exits 0 (a failing EpilogSlurmctld is logged by slurmctld but changes nothing
# for an ended job) and returns within milliseconds: slurmctld runs it beside its scheduling. The
# prolog exits 0 at once for a job on no guarded node and for one that need not wait; it exits 1
# only after PROLOG_WAIT_SECONDS of waiting, and 0 when its configuration is refused (then no
# epilog holds anything either).
# Log: one line per action to /var/log/slurm-bridge/handoff.log when that directory is writable,
# and why it did nothing, when it refused its configuration, to stderr too.
# ---- the front: a small shell decides "nothing to do" --------------------------------------------
# Every job's start and end runs this file, and bash's start alone costs slurmctld's host several
# times what a small POSIX shell's does (/bin/sh, dash on Debian). So that shell reads the file
# first and, with builtins only, decides whether the job is one the handoff has nothing to do for:
# none of its nodes guarded (NODES, its host lists expanded as Slurm does) and no NOTIFY to run
# (none set, the job's comment says no notice, or the bridge's notify hook would exit at its own
# front). Then it exits 0 having started nothing, which is all bash would have done (decided
# on the file's words alone, as below: a refused file makes it do nothing too). Where the one thing
# to do is to run the bridge's own notify hook, it runs that itself, once the files pass bash's own
# checks (fdirect: one stat), and exits 0 whatever the hook does, as bash would. Anything else -- a
# guarded node, no NODES, a NOTIFY to run, a file or a host list it does not fully understand --
# goes to bash (`-p`: no BASH_ENV, no functions from the environment), which does all, checks the
# file and says why it refuses one. bash runs this file from the top and skips the front: its
# options ($-, which no environment sets) hold B, a POSIX shell's never do.
case $- in *B*) ;; *)
  PATH=/usr/bin:/bin:/usr/sbin:/sbin
  # fb: hand the job to bash, this same file
  fb() { exec /bin/bash -p -- "$0"; }
  # fnum N: N's value without leading zeros (sh reads 010 as octal), in fn
  fnum() { fn=${1#"${1%%[!0]*}"}; fn=${fn:-0}; }
  # felem E: one host list element, prefix[ranges]suffix (one pair of brackets) or a plain name, into
  # fpre, franges (empty for a plain name), fsuf; anything else goes to bash
  felem() {
    case $1 in
      *'['*'['* | *']'*']'* | *']'*'['*) fb ;;
      *'['*']'*) fpre=${1%%'['*} franges=${1#*'['} fsuf=${franges#*']'} franges=${franges%%']'*}
        case $franges in '' | *[!0-9,-]* | ,* | *, | *,,*) fb ;; esac ;;
      *'['* | *']'*) fb ;;
      *) fpre=$1 franges='' fsuf='' ;;
    esac
  }
  # frange R: one range of a bracket, LO or LO-HI, into flo, fhi (values) and fw (the width: LO's
  # digits, as Slurm pads); a padded range whose ends differ in width, or a number of more than 9
  # digits, goes to bash
  frange() {
    case $1 in *-*-* | -* | *- | '') fb ;; esac
    fl=${1%-*} fh=${1#*-}
    [ ${#fl} -le 9 ] && [ ${#fh} -le 9 ] || fb
    case $fl in 0?*) [ ${#fl} = ${#fh} ] || fb ;; esac
    fw=${#fl}; fnum "$fl"; flo=$fn; fnum "$fh"; fhi=$fn
    [ "$flo" -le "$fhi" ] || fb
  }
  # fguarded NAME: NAME is one of NODES
  fguarded() {
    fname=$1 fpart=''
    set -f; IFS=,
    for fp in $fnodes; do
      IFS=$fifs
      case $fpart in '') ;; *) fp="$fpart,$fp" ;; esac
      case $fp in *'['*) case $fp in *']'*) fpart='' ;; *) fpart=$fp; IFS=,; continue ;; esac ;; esac
      felem "$fp"
      if [ -z "$franges" ]; then [ "$fname" = "$fp" ] && return 0; IFS=,; continue; fi
      case $fname in "$fpre"*"$fsuf") ;; *) IFS=,; continue ;; esac
      fm=${fname#"$fpre"} fm=${fm%"$fsuf"}
      case $fm in '' | *[!0-9]*) IFS=,; continue ;; esac
      fnum "$fm"; fv=$fn
      if [ ${#fv} -le 9 ]; then
        set -f; IFS=,
        for fr in $franges; do
          IFS=$fifs; frange "$fr"
          [ ${#fm} -lt "$fw" ] && continue
          [ ${#fm} -gt "$fw" ] && case $fm in 0*) continue ;; esac
          [ "$fv" -ge "$flo" ] && [ "$fv" -le "$fhi" ] && return 0
        done
      fi
      IFS=,
    done
    IFS=$fifs
    [ -z "$fpart" ] || fb   # a bracket left open
    return 1
  }
  # fdirect: the bridge's own notify hook, which exits 0 at once whatever happens (it sends in the
  # background), run by this small shell itself, without bash, where bash would run it: an absolute
  # path in NOTIFY's characters, a regular file (no link) it may execute, and this file and the hook
  # each root's or SlurmUser's and writable by no one else (one stat for both); and no
  # SLURM_BIN_DIR (bash's to check). Anything else returns, and bash checks, runs or refuses it.
  fdirect() {
    case $fnotify in /*) ;; *) return 0 ;; esac
    case $fnotify in *[!A-Za-z0-9_./+-]*) return 0 ;; esac
    case $fseen in *" SLURM_BIN_DIR "*) return 0 ;; esac
    [ -f "$fnotify" ] && [ ! -L "$fnotify" ] && [ -x "$fnotify" ] || return 0
    fst=$(stat -c '%u %a' -- "$fconf" "$fnotify" 2> /dev/null) || return 0
    set -f; set -- $fst; set +f
    [ $# -eq 4 ] && fowned "$1" "$2" "$fconf" && fowned "$3" "$4" "$fnotify" || return 0
    "$fnotify" < /dev/null > /dev/null 2>&1
    exit 0
  }
  # fowned UID MODE FILE: root's or this user's (the effective uid), and no write bit for group or others
  fowned() {
    case $1 in 0) ;; *) [ -O "$3" ] || return 1 ;; esac
    case $2 in [0-7][0-7][0-7] | [0-7][0-7][0-7][0-7]) ;; *) return 1 ;; esac
    [ $((0$2 & 022)) -eq 0 ]
  }
  fifs=$IFS
  case ${SLURM_JOB_ID:-} in '' | *[!0-9]*) exit 0 ;; esac
  [ -n "${SLURM_JOB_NODELIST:-}" ] || exit 0   # never allocated: nothing to hold
  case $0 in /*) ;; *) fb ;; esac
  fconf=${0%/*}/slurm-bridge-handoff.conf
  [ -f "$fconf" ] && [ ! -L "$fconf" ] && [ -r "$fconf" ] || fb
  fnodes='' fnotify='' fseen=' '
  while IFS= read -r fline || [ -n "$fline" ]; do
    case $fline in '' | '#'*) continue ;; *=*) ;; *) fb ;; esac
    fkey=${fline%%=*}
    case $fseen in *" $fkey "*) fb ;; esac
    fseen="$fseen$fkey "
    case $fkey in
      NODES) fnodes=${fline#*=} ;;
      NOTIFY) fnotify=${fline#*=} ;;
      BRIDGE_IDS | MAX_HOLD_SECONDS | SLURM_BIN_DIR | STATE_DIR | PROLOG_WAIT_SECONDS) ;;
      *) fb ;;
    esac
  done < "$fconf"
  case $fnodes in '' | *[!][A-Za-z0-9_.,-]*) fb ;; esac   # every node guarded, or a list to refuse
  # every node of the job (a list of 4096 or more goes to bash), each looked up in NODES
  fcount=0 fpart=''
  case $SLURM_JOB_NODELIST in *[!][A-Za-z0-9_.,-]*) fb ;; esac
  set -f; IFS=,
  for fj in $SLURM_JOB_NODELIST; do
    IFS=$fifs
    case $fpart in '') ;; *) fj="$fpart,$fj" ;; esac
    case $fj in *'['*) case $fj in *']'*) fpart='' ;; *) fpart=$fj; IFS=,; continue ;; esac ;; esac
    felem "$fj"
    if [ -z "$franges" ]; then
      fcount=$((fcount + 1)); fguarded "$fj" && fb
    else
      fjpre=$fpre fjsuf=$fsuf fjranges=$franges
      set -f; IFS=,
      for fjr in $fjranges; do
        IFS=$fifs; frange "$fjr"
        fcount=$((fcount + fhi - flo + 1))
        [ "$fcount" -lt 4096 ] || fb
        fk=$flo fjw=$fw fjhi=$fhi
        while [ "$fk" -le "$fjhi" ]; do
          fd=$fk
          while [ ${#fd} -lt "$fjw" ]; do fd=0$fd; done
          fguarded "$fjpre$fd$fjsuf" && fb
          fk=$((fk + 1))
        done
        IFS=,
      done
    fi
    IFS=,
  done
  IFS=$fifs
  [ -z "$fpart" ] && [ "$fcount" -gt 0 ] || fb
  # no guarded node: nothing to do but NOTIFY, where bash would run it (run_notify's tests: "none",
  # no notice; "ended", none of its start; bash takes any context but the prolog's for the epilog's)
  [ -n "$fnotify" ] || exit 0
  case ${SLURM_JOB_COMMENT:-} in
    slurm-bridge:*'"notify":"none"'*) exit 0 ;;
    slurm-bridge:*'"notify":"ended"'*) [ "${SLURM_SCRIPT_CONTEXT:-}" != prolog_slurmctld ] || exit 0 ;;
  esac
  # nor the bridge's notify hook where it would exit at its own front: outside slurmctld's prolog
  # and epilog, and for a job not in /tmp (the bridge's working directory)
  case $fnotify in */slurm-bridge-notify.sh | */slurm-bridge-notify)
    case ${SLURM_SCRIPT_CONTEXT:-} in prolog_slurmctld | epilog_slurmctld) ;; *) exit 0 ;; esac
    case ${SLURM_JOB_WORK_DIR:-/tmp} in /tmp) ;; *) exit 0 ;; esac
    fdirect ;;   # returns where bash must run it
  esac
  exec /bin/bash -p -- "$0" --no-guarded-node ;;   # bash runs NOTIFY and exits: no node list to expand
esac

PATH=/usr/bin:/bin:/usr/sbin:/sbin
IFS=$' \t\n'

LOG_DIR=/var/log/slurm-bridge
PROVISIONAL_SECONDS=30   # a candidate's hold until its AdminComment is read (see "The provisional hold")
PROLOG_POLL_SECONDS=0.5  # how often a waiting prolog looks again
HOSTLIST_RE='^[][A-Za-z0-9_.,-]+$'
# The states of a job that ended, for the prolog. COMPLETING too: slurmctld keeps a job COMPLETING
# while its EpilogSlurmctld runs (this script's epilog, which has not decided yet), and an external
# job's CPUs are Slurm's to give away from its end on.
ENDED='BOOT_FAIL,CANCELLED,COMPLETED,COMPLETING,DEADLINE,FAILED,NODE_FAIL,OUT_OF_MEMORY,PREEMPTED,TIMEOUT'
case ${SLURM_SCRIPT_CONTEXT:-} in prolog_slurmctld) context=prolog ;; *) context=epilog ;; esac
PREFIX='slurm-bridge:'
log() { [ -w "$LOG_DIR" ] && echo "$(date +%Y-%m-%dT%H:%M:%S.%N) job=${SLURM_JOB_ID:-?} $*" >> "$LOG_DIR/handoff.log"; }
refuse() { notify=''; echo "slurm-bridge-handoff: $*: nothing held (docs/colocation.md, \"The handoff\")" >&2; log "$*: nothing held"; exit 0; }

# ---- the configuration file ----------------------------------------------------------------------
# read_conf parses the file with builtins only; check_conf, its owner and mode (a process: stat),
# comes before the script acts on anything it read or runs a program: before NOTIFY, before any
# scontrol (SLURM_BIN_DIR goes into PATH only then), and once the job has a guarded node. A job on
# no guarded node (one plain node name, NODES without brackets) is decided on the file's words
# alone and exits having done nothing, which is all a refused file would make the script do.
read_conf() { # sets bridge_ids (array), max_hold, state_dir, guarded (NODES), prolog_wait, notify, bin_dir
  local line key value id   # conf stays: check_notify names it
  case $0 in /*) conf="${0%/*}/slurm-bridge-handoff.conf" ;; *) refuse "started without an absolute path ($0)" ;; esac
  [ -e "$conf" ] || [ -L "$conf" ] || refuse "no configuration file $conf"
  [ ! -L "$conf" ] && [ -f "$conf" ] || refuse "$conf is not a regular file"
  [ -r "$conf" ] || refuse "cannot read $conf"
  bridge_ids=() max_hold=86400 state_dir=/var/spool/slurm-bridge guarded='' prolog_wait=900 notify='' bin_dir=''
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
        bin_dir=$value ;;  # into PATH once the file is checked (check_conf)
      STATE_DIR)
        [[ $value =~ ^/[A-Za-z0-9_./+-]*$ ]] || refuse "$conf: STATE_DIR=$value is not an absolute path"
        state_dir=$value ;;
      NODES)
        [[ $value =~ $HOSTLIST_RE ]] || refuse "$conf: NODES=$value is not a Slurm host list"
        guarded=$value ;;
      PROLOG_WAIT_SECONDS)
        [[ $value =~ ^[0-9]{1,9}$ ]] && (( 10#$value > 0 )) || refuse "$conf: PROLOG_WAIT_SECONDS=$value is not a number of seconds (1 to 999999999)"
        prolog_wait=$((10#$value)) ;;
      NOTIFY) notify=$value ;;  # checked where it is run (check_notify)
      *) refuse "$conf: unknown key $key (BRIDGE_IDS, MAX_HOLD_SECONDS, SLURM_BIN_DIR, STATE_DIR, NODES, PROLOG_WAIT_SECONDS, NOTIFY)" ;;
    esac
  done < "$conf"
  [ ${#bridge_ids[@]} -gt 0 ] || refuse "$conf: no BRIDGE_IDS"
}

conf_checked=''
check_conf() { # the file root's (or SlurmUser's) and writable by no one else, once; then SLURM_BIN_DIR
  local owner mode
  [ -z "$conf_checked" ] || return 0
  read -r owner mode < <(stat -c '%u %a' -- "$conf" 2>/dev/null)
  [ "$owner" = 0 ] || [ "$owner" = "$EUID" ] || refuse "$conf is owned by uid ${owner:-?}, not root or $(id -un)"
  case $mode in [0-7][0-7][0-7] | [0-7][0-7][0-7][0-7]) ;; *) refuse "cannot read the mode of $conf" ;; esac
  (( (8#$mode & 8#022) == 0 )) || refuse "$conf is writable by group or others (mode $mode)"
  [ -z "$bin_dir" ] || PATH="$bin_dir:$PATH"
  conf_checked=1
}

# The paths of the configuration file are checked where they are used, each a process (stat): a
# job on no guarded node uses neither, and every job's start and end runs this script.
# check_notify: NOTIFY is run only as a file of root's or SlurmUser's that group and others cannot
# write; a bad one is left out, not the whole file (the holds do not depend on it).
check_notify() {
  [ -n "$notify" ] || return 0
  if [[ $notify =~ ^/[A-Za-z0-9_./+-]*$ ]] && owned_safely "$notify" && [ -x "$notify" ]; then return 0; fi
  log "$conf: NOTIFY=$notify is not an executable file of root's or $(id -un)'s that group and others cannot write: not run"
  notify=''
}
# run_notify: NOTIFY, with the job's environment, unless its comment says the bridge needs no
# notice of this (the notify hook's own test, two processes fewer): "none", of nothing; "ended",
# not of its start (allocated inside the bridge's call). The job's user can set it, and so only
# makes their own pods wait for the operator's next poll. The bridge's notify hook is not started
# where it would exit at its own front: outside slurmctld's prolog and epilog, and for a job not in
# /tmp (the bridge's working directory). The front (above) decides the same. The file is checked
# first; a refused one runs nothing (refuse empties notify).
run_notify() {
  case ${SLURM_JOB_COMMENT:-} in
    slurm-bridge:*'"notify":"none"'*) return 0 ;;
    slurm-bridge:*'"notify":"ended"'*) [ "$context" = epilog ] || return 0 ;;
  esac
  case $notify in
    '') return 0 ;;
    */slurm-bridge-notify.sh | */slurm-bridge-notify)
      case ${SLURM_SCRIPT_CONTEXT:-} in prolog_slurmctld | epilog_slurmctld) ;; *) return 0 ;; esac
      [ "${SLURM_JOB_WORK_DIR:-/tmp}" = /tmp ] || return 0 ;;
  esac
  check_conf
  check_notify
  [ -z "$notify" ] || "$notify" < /dev/null > /dev/null 2>&1 || log "$context: $notify failed (ignored)"
  notify=''   # once
}
# check_state_dir: STATE_DIR, a directory only SlurmUser (or root) can change, else markers could be
# forged or removed; without one, the epilog notes nothing and the prolog waits the longer way.
check_state_dir() {
  [ -n "$state_dir" ] && ! owned_safely "$state_dir" -d || return 0
  log "STATE_DIR $state_dir is not a directory of root's or $(id -un)'s that group and others cannot write: not used, no handoff is noted done (the prolog waits ${PROVISIONAL_SECONDS}s after each job end on its nodes)"
  state_dir=''
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

# owned_safely PATH [-f|-d]: a regular file (or a directory: -d), no link, of root's or this user's,
# not writable by group or others
owned_safely() {
  local owner mode
  [ ! -L "$1" ] && [ "${2:--f}" "$1" ] || return 1
  read -r owner mode < <(stat -c '%u %a' -- "$1" 2>/dev/null)
  { [ "$owner" = 0 ] || [ "$owner" = "$EUID" ]; } && [[ $mode =~ ^[0-7]{3,4}$ ]] && (( (8#$mode & 8#022) == 0 ))
}

listed() { local id; for id in "${bridge_ids[@]}"; do [ "$id" = "$1" ] && return 0; done; return 1; }

# ---- the reservations -----------------------------------------------------------------------------
# make NODE CPUS BRIDGE SCOPE SECONDS: one node's hold; sets made (the scope it got: a count that does
# not fit falls back to the whole node, "" when Slurm refused both)
make() {
  local name="handoff-${job}_$3_$1" what out out2
  made=''
  [ -n "$me" ] || me=$(id -un)
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

# ---- the prolog ----------------------------------------------------------------------------------
# A starting job waits while, on any of its guarded nodes,
#   a job that ended there within PROVISIONAL_SECONDS has no STATE_DIR/<id>.done since it started:
#     its epilog has not decided what to hold (slurmctld may have given its CPUs to this job before
#     the epilog ran);
#   the node is overbooked: its allocated CPUs (this job's among them) and those a live hold of a
#     listed bridge covers exceed its CPUs. A whole-node hold covers them all (nothing started after
#     it may run there); a count hold, what the pod had. Counted as Slurm counts, not core by core:
#     the hold takes the lowest free cores, the job the ones Slurm gave it.
# Which jobs ran on a node, the prolog notes itself: STATE_DIR/<node>@<job id>.run for each guarded
# node of each job that starts (note_start), removed by the job's epilog once it decided. So a start
# reads from slurmctld only the states of the jobs noted on its own nodes and not decided (one
# `squeue --only-job-state` of those ids), and the end time of one that ended: the same few reads
# with 10,000 jobs in Slurm as with 10. Without STATE_DIR, one read of Slurm's whole job table
# (squeue -w: its filter is the client's) finds the ended ones.
# reasons NODE...: one line per reason to wait, none when the job may start; a failed read is a
# reason too (the safe side). Reads: the jobs (above), scontrol show res, and scontrol show node per
# held node.
reasons() {
  local list out id end now since line node cpus alloc tot noted=1
  local -A held=() mine=()
  for node in "$@"; do mine[$node]=1; [[ $node =~ ^[A-Za-z0-9_.-]+$ ]] || noted=''; done
  # squeue's end times are local times to the second, in an order strings keep: compared as such,
  # no fork per line (a node may have hundreds of ended jobs within MinJobAge)
  printf -v now '%(%Y-%m-%dT%H:%M:%S)T' -1
  printf -v since '%(%Y-%m-%dT%H:%M:%S)T' "$((EPOCHSECONDS - PROVISIONAL_SECONDS))"
  if [ -n "$state_dir" ] && [ -n "$noted" ]; then
    undecided "$@"
  elif printf -v list '%s,' "$@"; ! out=$(squeue -h -t "$ENDED" -w "${list%,}" -o '%A %e' 2>&1); then
    echo "squeue failed: ${out//$'\n'/ }"
  else
    while read -r id end; do
      [[ $id =~ ^[0-9]+$ ]] && [ "$id" != "$job" ] || continue
      [[ $end =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}$ ]] || continue
      [[ ! $end < $since && ! $end > $now ]] || continue
      [ -n "$state_dir" ] && [ -e "$state_dir/$id.done" ] && continue
      echo "job $id ended at $end and its handoff is not decided yet"
    done <<< "$out"
  fi
  if ! out=$(scontrol show res -o 2>&1); then
    echo "scontrol show res failed: ${out//$'\n'/ }"
    return
  fi
  while IFS= read -r line; do
    [[ $line =~ ^ReservationName=handoff-[0-9]+_([a-z0-9-]+)_([^\ ]+)\  ]] || continue
    listed "${BASH_REMATCH[1]}" || continue
    node=${BASH_REMATCH[2]}
    [ -n "${mine[$node]:-}" ] && [[ $line =~ \ State=ACTIVE ]] || continue
    if [[ $line =~ \ Flags=([^\ ]*) ]] && [[ ,${BASH_REMATCH[1]}, == *,IGNORE_JOBS,* ]]; then cpus=all
    elif [[ $line =~ \ TRES=cpu=([0-9]+) ]]; then cpus=${BASH_REMATCH[1]}
    else cpus=all
    fi
    if [ "$cpus" = all ] || [ "${held[$node]:-}" = all ]; then held[$node]=all; else held[$node]=$(( ${held[$node]:-0} + cpus )); fi
  done <<< "$out"
  for node in "${!held[@]}"; do
    if ! out=$(scontrol show node "$node" -o 2>&1); then echo "scontrol show node $node failed: ${out//$'\n'/ }"; continue; fi
    [[ $out =~ \ CPUAlloc=([0-9]+) ]] || { echo "node $node: no CPUAlloc in scontrol show node"; continue; }
    alloc=${BASH_REMATCH[1]}
    [[ $out =~ \ CPUEfctv=([0-9]+) ]] || [[ $out =~ \ CPUTot=([0-9]+) ]] || { echo "node $node: no CPUTot in scontrol show node"; continue; }
    tot=${BASH_REMATCH[1]}
    cpus=${held[$node]}
    [ "$cpus" != all ] || cpus=$tot
    (( alloc + cpus <= tot )) || echo "node $node: $alloc CPUs allocated and $cpus held for a stopping pod, of $tot"
  done
}

# undecided NODE...: as reasons, from the jobs noted on these nodes (STATE_DIR/<node>@<id>.run)
# whose epilog has not noted a decision since (<id>.done newer than the note): their states, in one
# read of these ids only; then, for each that ended, its end time (one read each: rare, a handoff in
# flight). Notes of jobs Slurm no longer knows, or that ended before PROVISIONAL_SECONDS, are
# removed (their epilog never ran: a slurmctld restart, a full disk), and so is one older than its
# job's done marker (its epilog ran but could not remove it).
undecided() {
  local node note id out state end list
  local -a ids=() stale=()
  local -A seen=() state_of=()
  for node in "$@"; do
    for note in "$state_dir/$node@"*.run; do
      [ -e "$note" ] || continue
      id=${note##*@} id=${id%.run}
      [[ $id =~ ^[0-9]+$ ]] && [ "$id" != "$job" ] && [ -z "${seen[$id]:-}" ] || continue
      seen[$id]=1
      # decided since it started: its epilog ran, and should have removed the note
      if [ "$state_dir/$id.done" -nt "$note" ]; then stale+=("$id"); else ids+=("$id"); fi
    done
  done
  [ ${#ids[@]} -gt 0 ] || { [ ${#stale[@]} -eq 0 ] || forget "${stale[@]}"; return 0; }
  printf -v list '%s,' "${ids[@]}"
  if ! out=$(squeue --only-job-state -h -t all -j "${list%,}" -o '%A %T' 2>&1); then
    echo "squeue failed: ${out//$'\n'/ }"
    return
  fi
  while read -r id state; do [[ $id =~ ^[0-9]+$ ]] && state_of[$id]=$state; done <<< "$out"
  for id in "${ids[@]}"; do
    state=${state_of[$id]:-}
    [ -n "$state" ] || { stale+=("$id"); continue; }
    [[ ,$ENDED, == *,"$state",* ]] || continue   # running, or pending again
    if ! out=$(squeue -h -t all -j "$id" -o '%e' 2>&1); then echo "squeue failed: ${out//$'\n'/ }"; continue; fi
    end=${out%%$'\n'*}
    if [[ $end =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}$ ]] && [[ $end < $since ]]; then
      stale+=("$id")
      continue
    fi
    echo "job $id ended at $end and its handoff is not decided yet"
  done
  [ ${#stale[@]} -eq 0 ] || forget "${stale[@]}"
}

# note_start NODE...: STATE_DIR/<node>@<job id>.run for each of the job's guarded nodes (a node
# name fit for a file name; reasons reads the whole job table for a job with any other)
note_start() {
  local node
  [ -n "$state_dir" ] || return 0
  for node in "$@"; do
    [[ $node =~ ^[A-Za-z0-9_.-]+$ ]] || continue
    : > "$state_dir/$node@$job.run" 2> /dev/null || log "cannot write $state_dir/$node@$job.run"
  done
}
# forget ID...: remove the jobs' notes (one process for all, none when there are none)
forget() {
  local id note
  local -a notes=()
  for id in "$@"; do
    for note in "$state_dir/"*"@$id.run"; do [ -e "$note" ] && notes+=("$note"); done
  done
  [ ${#notes[@]} -eq 0 ] || rm -f -- "${notes[@]}" 2> /dev/null || log "cannot remove ${notes[*]}"
}

# is_external: the job is an external job (a bridge's): it launches nothing, so it never waits (and
# never fails: Slurm cannot requeue it). Its "flags" array, at the job's own level of the JSON (a
# user's string is one escaped line, never a line of its own).
is_external() {
  local json line in_flags=''
  json=$(scontrol --json show job "$job" 2>/dev/null) || return 1
  while IFS= read -r line; do
    if [ -z "$in_flags" ]; then
      [ "$line" = '      "flags": [' ] && in_flags=1
      continue
    fi
    [[ $line =~ ^\ *\] ]] && return 1
    [[ $line =~ ^\ {8}\"EXTERNAL_JOB\",?$ ]] && return 0
  done <<< "$json"
  return 1
}

# guarded_of: the indexes in nodes of the job's guarded nodes (NODES; every node without it, or when
# it cannot be expanded), into the array mine_i. A plain list of names needs no call (each job start
# and end runs this).
guarded_of() {
  local -a names=()
  local -A gset=()
  local i node
  mine_i=()
  if [ -n "$guarded" ]; then
    case $guarded in
      *[][]*) check_conf; mapfile -t names < <(scontrol show hostnames "$guarded" 2>/dev/null) ;;
      *) IFS=, read -r -a names <<< "$guarded" ;;
    esac
    if [ ${#names[@]} -gt 0 ]; then
      for node in "${names[@]}"; do gset[$node]=1; done
      for i in "${!nodes[@]}"; do [ -z "${gset[${nodes[$i]}]:-}" ] || mine_i+=("$i"); done
      return
    fi
    log "$context: NODES=$guarded could not be expanded: every node guarded"
  fi
  mine_i=("${!nodes[@]}")
}

# unsettled HOSTLIST: one line per node a job that waited here must not start on yet. (1) A node a
# bridge's handoff drained (State has DRAIN, Reason is slurm-bridge-handoff[<a listed id>]: ...,
# which only a Slurm operator can write): the bridge says a pod still runs there past its hold, so
# the job goes on waiting even once no reservation holds the node (the hold ended by its EndTime, or
# the bridge deletes it just before it lifts the drain). (2) A node that slurmctld marked
# NOT_RESPONDING and has not heard from since, as it marks a node whose drain is lifted (Slurm 26.05
# pings it again, within a second): slurmctld defers the launch until the node answers, and that
# answer, which lists no such job on a node given to it more than BatchStartTimeout +
# MessageTimeout ago, makes slurmctld requeue it as lost ("missing from batch node", then BeginTime
# for minutes). The handoff's usual end deletes a hold and then lifts its drain: a read between the
# two found neither reason before (1).
unsettled() {
  local out line node state
  if ! out=$(scontrol show node "$1" -o 2>&1); then echo "scontrol show node $1 failed: ${out//$'\n'/ }"; return; fi
  while IFS= read -r line; do
    [[ $line == NodeName=*' State='* ]] || { echo "scontrol show node $1: no node's State in: $line"; continue; }
    node=${line#NodeName=} node=${node%% *} state=${line#* State=} state=${state%% *}   # the first State=
    if [[ +$state+ == *+DRAIN+* && $line =~ \ Reason=slurm-bridge-handoff\[([a-z0-9-]+)\]:\  ]] && listed "${BASH_REMATCH[1]}"; then
      echo "node $node is drained by bridge ${BASH_REMATCH[1]}'s handoff: a pod still runs there"
      continue
    fi
    [[ +$state+ != *+NOT_RESPONDING+* ]] || echo "node $node is not responding yet (slurmctld pings it again)"
  done <<< "$out"
}

# prolog: the job's guarded nodes, then wait while there is a reason (at most PROLOG_WAIT_SECONDS);
# a job that waited also waits until no bridge's handoff drains its nodes and they answer
# slurmctld (unsettled).
prolog() {
  local -a mine=() mine_i
  local i why first=1 start=${EPOCHREALTIME/[.,]/}   # microseconds
  guarded_of
  for i in "${mine_i[@]}"; do mine+=("${nodes[$i]}"); done
  [ ${#mine[@]} -gt 0 ] || exit 0
  check_conf
  check_state_dir
  note_start "${mine[@]}"
  while why=$(reasons "${mine[@]}"); [ -n "$why" ] || [ -n "$first" ] || why=$(unsettled "$SLURM_JOB_NODELIST"); [ -n "$why" ]; do
    why=${why//$'\n'/; }
    if [ -n "$first" ]; then
      first=''
      if is_external; then log "prolog: an external job, it launches nothing: not held ($why)"; exit 0; fi
      log "prolog: held in CONFIGURING: $why"
    fi
    if (( ${EPOCHREALTIME/[.,]/} - start >= prolog_wait * 1000000 )); then
      log "prolog: still held after ${prolog_wait}s ($why): the prolog fails; Slurm requeues the job or ends it"
      echo "slurm-bridge-handoff: job $job waited ${prolog_wait}s for a stopping pod's CPUs on ${mine[*]}: $why" >&2
      exit 1
    fi
    sleep "$PROLOG_POLL_SECONDS"
  done
  [ -n "$first" ] || log "prolog: may start after $(( (${EPOCHREALTIME/[.,]/} - start) / 1000 ))ms"
  exit 0
}

# mark_done: the epilog's sign for the prolog that this job's handoff is decided (on every exit once
# the job's guarded nodes are known; a job on none needs none, the prolog never asks for it);
# markers older than 10 minutes are swept now and then.
mark_done() {
  [ -n "$state_dir" ] || return 0
  : > "$state_dir/$job.done" 2> /dev/null || log "cannot write $state_dir/$job.done"
  forget "$job"   # its prolog's notes (note_start)
  (( job % 64 )) || find "$state_dir" -maxdepth 1 -type f -name '*.done' -mmin +10 -delete 2> /dev/null
  return 0
}

# ---- main -----------------------------------------------------------------------------------------
job=${SLURM_JOB_ID:-}
[[ $job =~ ^[0-9]+$ ]] || exit 0
[ -n "${SLURM_JOB_NODELIST:-}" ] || exit 0   # never allocated: nothing to hold
read_conf
# The notify hook: the prolog's first (the bridge's start notice waits for nothing); the epilog's
# last, on every exit (the trap; a refused file runs none), once its holds are made: they are a race
# with slurmctld's scheduling that the notice's few milliseconds would widen, and the bridge, told
# of the end, finds them there. It returns at once (it detaches its sender), as the epilog must.
if [ "$context" = prolog ]; then run_notify; else trap run_notify EXIT; fi
# the front found no guarded node (its only argument; slurmctld gives none): nothing else to do
[ "${1:-}" != --no-guarded-node ] || exit 0
me=''   # SlurmUser's name, read when a hold is first made (make)

# SLURM_JOB_CPUS_PER_NODE in node order: "4,2(x3)" -> 4 2 2 2
cpus=()
for item in ${SLURM_JOB_CPUS_PER_NODE//,/ }; do
  n=${item%%(*} r=1
  case $item in *'(x'*')') r=${item#*(x} r=${r%)} ;; esac
  [[ $n =~ ^[0-9]+$ && $r =~ ^[0-9]+$ ]] || { cpus=(); break; }   # unreadable: the whole nodes
  for ((i = 0; i < r; i++)); do cpus+=("$n"); done
done
case $SLURM_JOB_NODELIST in   # one plain node name: no call (the provisional hold's time)
  *[][,\ ]*) check_conf; mapfile -t nodes < <(scontrol show hostnames "$SLURM_JOB_NODELIST" 2>/dev/null) ;;
  *) nodes=("$SLURM_JOB_NODELIST") ;;
esac
if [ "$context" = prolog ]; then
  [ ${#nodes[@]} -gt 0 ] || { log "prolog: scontrol show hostnames $SLURM_JOB_NODELIST failed: not held"; exit 0; }
  prolog
fi
[ ${#nodes[@]} -gt 0 ] || log "scontrol show hostnames $SLURM_JOB_NODELIST failed: nothing held"

# Only the guarded nodes (NODES) are held: on the others no slurmd runs, so no native job can
# start under a stopping pod, and Kubernetes keeps a new pod off its resources itself. A job on no
# guarded node costs no call (an external node's every bridge job end ran three before).
guarded_of
if [ ${#mine_i[@]} -lt ${#nodes[@]} ]; then
  kept=() kept_cpus=()
  for i in "${mine_i[@]}"; do kept+=("${nodes[$i]}") kept_cpus+=("${cpus[$i]:-}"); done
  [ ${#kept[@]} -gt 0 ] || exit 0   # no marker either: the prolog looks only at guarded nodes' jobs
  nodes=("${kept[@]}") cpus=("${kept_cpus[@]}")
fi
check_conf
check_state_dir
trap 'mark_done; run_notify' EXIT   # the prolog's sign first: a job may be waiting for it

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
