#!/usr/bin/env bash
# hack/cluster.sh's Slurm accounting: MariaDB (its own Debian root) -> slurmdbd (the Slurm root) ->
# the tenants' Unix users and associations (hack/accounting.env). Sourced by hack/cluster.sh;
# defines functions only. A stopped MariaDB or slurmdbd is started again by `up` with the data it
# had: only `down` removes the database.
#
# The users and associations are reusable for a Slurm elsewhere (a kind cluster): each step takes
# the command that runs a program where Slurm is, and is idempotent (run it again, nothing doubles):
#   bash hack/cluster/accounting.sh users kubectl exec -i slurmctld-0 --         # Unix users, groups
#   bash hack/cluster/accounting.sh associations kubectl exec -i slurmctld-0 --  # sacctmgr: cluster, QOS, accounts, users
# (or, in a script: . hack/lib.sh; . hack/cluster/accounting.sh; create_associations CMD...). The
# cluster is SB_SLURM_CLUSTER, which must be slurm.conf's ClusterName (slurm_conf cluster=...).

in_db_root() { chroot "$MARIADB_ROOT" "$@"; }
DB_STATE_IN_ROOT=/var/lib/slurm-bridge-db   # inside the MariaDB root; removed by `down`
DB_PASSWORD_FILE="$STATE_DIR/slurm/db-password"

up_mariadb() {
  alive mariadb && return 0
  check_port mariadb "$SB_MARIADB_PORT" SB_MARIADB_PORT
  cp /etc/hosts "$MARIADB_ROOT/etc/hosts"
  mkdir -p "$MARIADB_ROOT/run/mysqld" "$LOGS"
  in_db_root chown mysql:mysql /run/mysqld
  # The database survives a restart (a MariaDB that stopped); a data directory without the
  # password slurmdbd uses for it is made afresh.
  local fresh=
  if [ ! -d "$MARIADB_ROOT$DB_STATE_IN_ROOT/mysql" ] || [ ! -s "$DB_PASSWORD_FILE" ]; then
    fresh=1
    rm -rf "${MARIADB_ROOT:?}$DB_STATE_IN_ROOT"
    in_db_root mariadb-install-db --user=mysql --datadir="$DB_STATE_IN_ROOT" --skip-test-db \
      --auth-root-authentication-method=socket > "$LOGS/mariadb-install.log" 2>&1 \
      || { tail -n 20 "$LOGS/mariadb-install.log" >&2; die "mariadb-install-db failed (log: $LOGS/mariadb-install.log)"; }
  fi
  start mariadb chroot "$MARIADB_ROOT" /usr/sbin/mariadbd --user=mysql --datadir="$DB_STATE_IN_ROOT" \
    --socket=/run/mysqld/mysqld.sock --port="$SB_MARIADB_PORT" --bind-address=127.0.0.1 --skip-name-resolve
  wait_ready mariadb "$SB_READY_TIMEOUT" in_db_root mariadb -S /run/mysqld/mysqld.sock -e 'select 1'
  [ -n "$fresh" ] || return 0
  mkdir -p "$(dirname "$DB_PASSWORD_FILE")"
  head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' > "$DB_PASSWORD_FILE"; chmod 600 "$DB_PASSWORD_FILE"
  in_db_root mariadb -S /run/mysqld/mysqld.sock -e "
    CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$(cat "$DB_PASSWORD_FILE")';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" || die "creating slurmdbd's database user failed"
}

write_slurmdbd_conf() {
  local conf="$SLURM_ROOT/etc/slurm/slurmdbd.conf"
  slurmdbd_conf storage_pass="$(cat "$DB_PASSWORD_FILE")" > "$conf"
  in_root chown slurm:slurm /etc/slurm/slurmdbd.conf
  chmod 600 "$conf"
}

# ---- users and associations (each step: CMD... runs a program where Slurm runs) -----------------
ensure_tenant_users() { # CMD... : every tenant's Unix user and group (slurmctld resolves job owners; slurmd runs jobs as them)
  # shellcheck source=../accounting.env
  . "$HACK_DIR/accounting.env"
  local t user uid group gid accounts qos
  for t in $TENANTS; do
    IFS=: read -r user uid group gid accounts qos <<< "$t"
    "$@" getent group "$group" >/dev/null || "$@" groupadd -g "$gid" "$group" || die "groupadd $group failed"
    "$@" getent passwd "$user" >/dev/null \
      || "$@" useradd -u "$uid" -g "$gid" -M -d /nonexistent -s /usr/sbin/nologin "$user" || die "useradd $user failed"
  done
}

_ACCT_RUN=()
acct_list() { # what format : sacctmgr's list, one value a line
  "${_ACCT_RUN[@]}" sacctmgr -n -P list "$1" format="$2" 2>/dev/null || die "sacctmgr list $1 failed (is slurmdbd running? $LOGS/slurmdbd.log)"
}
acct_add() { # ARGS : sacctmgr -i add ARGS (callers add only what acct_missing found missing)
  "${_ACCT_RUN[@]}" sacctmgr -i add "$@" >/dev/null || die "sacctmgr add $* failed; see $LOGS/slurmdbd.log"
}
acct_missing() { # existing(newline list) wanted(comma list) : the wanted ones that do not exist, as a comma list
  local w out=()
  for w in ${2//,/ }; do grep -qxF "$w" <<< "$1" || out+=("$w"); done
  (IFS=,; echo "${out[*]}")
}

create_associations() { # CMD... : cluster, QOS, accounts and users of hack/accounting.env, what is missing
  # shellcheck source=../accounting.env
  . "$HACK_DIR/accounting.env"
  _ACCT_RUN=("$@")
  local t user uid group gid accounts qos missing
  [ -n "$(acct_missing "$(acct_list cluster cluster)" "$SB_SLURM_CLUSTER")" ] && acct_add cluster "$SB_SLURM_CLUSTER"
  missing=$(acct_missing "$(acct_list qos name)" "high")
  [ -z "$missing" ] || acct_add qos "$missing"
  missing=$(acct_missing "$(acct_list account account)" "$BRIDGE_ACCOUNTS")
  [ -z "$missing" ] || acct_add account "$missing" Description=slurm-bridge Organization=slurm-bridge
  missing=$(acct_missing "$(acct_list qos name)" "$BRIDGE_QOS")
  [ -z "$missing" ] || acct_add qos "$missing"
  add_user "$SB_BRIDGE_SLURM_USER" "$BRIDGE_ACCOUNTS" "$BRIDGE_QOS"
  for t in $TENANTS; do
    IFS=: read -r user uid group gid accounts qos <<< "$t"
    missing=$(acct_missing "$(acct_list qos name)" "${qos%%,*}")
    [ -z "$missing" ] || acct_add qos "$missing" "$TENANT_QOS_LIMIT"
    missing=$(acct_missing "$(acct_list qos name)" "$qos")   # the others, without the tenant's limit
    [ -z "$missing" ] || acct_add qos "$missing"
    missing=$(acct_missing "$(acct_list account account)" "$accounts")
    [ -z "$missing" ] || acct_add account "$missing" Description="$group" Organization="$group"
    add_user "$user" "$accounts" "$qos"
  done
  set_qos_preemption
}

set_qos_preemption() { # QOS_PREEMPT and QOS_MODES of hack/accounting.env: which QOS preempts which, and how
  local word q preempted mode grace missing
  for word in $QOS_PREEMPT; do
    q=${word%%:*} preempted=${word#*:}
    missing=$(acct_missing "$(acct_list qos name)" "$q,$preempted")
    [ -z "$missing" ] || acct_add qos "$missing"
    "${_ACCT_RUN[@]}" sacctmgr -i modify qos "$q" set Preempt="$preempted" >/dev/null \
      || die "sacctmgr modify qos $q set Preempt=$preempted failed; see $LOGS/slurmdbd.log"
  done
  for word in ${QOS_MODES:-}; do
    IFS=: read -r q mode grace <<< "$word"
    missing=$(acct_missing "$(acct_list qos name)" "$q")
    [ -z "$missing" ] || acct_add qos "$missing"
    "${_ACCT_RUN[@]}" sacctmgr -i modify qos "$q" set PreemptMode="$mode" GraceTime="${grace:-0}" >/dev/null \
      || die "sacctmgr modify qos $q set PreemptMode=$mode GraceTime=$grace failed; see $LOGS/slurmdbd.log"
  done
}

add_user() { # user accounts qos : the user's associations with every one of accounts (the first is its default)
  local have missing
  have=$("${_ACCT_RUN[@]}" sacctmgr -n -P list assoc user="$1" format=account 2>/dev/null) \
    || die "sacctmgr list assoc user=$1 failed"
  missing=$(acct_missing "$have" "$2")
  [ -z "$missing" ] || acct_add user "$1" Account="$missing" DefaultAccount="${2%%,*}" QOS="$3" DefaultQOS="${3%%,*}"
}

up_accounting() { # MariaDB and slurmdbd, started if they are not running, then the associations
  alive slurmdbd && return 0
  up_mariadb
  write_slurmdbd_conf
  check_port slurmdbd "$SB_SLURMDBD_PORT" SB_SLURMDBD_PORT
  start slurmdbd chroot "$SLURM_ROOT" /usr/sbin/slurmdbd -D
  # Its first connection to MariaDB fails on TLS and is retried after 5 s (docs/development.md).
  wait_ready slurmdbd "$SB_READY_TIMEOUT" in_root sacctmgr -n list cluster
  ensure_tenant_users in_root
  create_associations in_root
}

# Run as a script: one reusable step against a Slurm elsewhere.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  . "$(dirname "$0")/../lib.sh"
  case "${1:-}" in
    users) shift; [ $# -gt 0 ] || die "usage: hack/cluster/accounting.sh users CMD..."; ensure_tenant_users "$@" ;;
    associations) shift; [ $# -gt 0 ] || die "usage: hack/cluster/accounting.sh associations CMD..."; create_associations "$@" ;;
    *) die "usage: hack/cluster/accounting.sh users|associations CMD... (CMD runs a program where Slurm runs, e.g. 'kubectl exec -i slurmctld-0 --')" ;;
  esac
fi
