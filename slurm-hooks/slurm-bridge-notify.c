/*
 * slurm-bridge-notify: slurmctld's hook to the bridge, compiled. It does what
 * slurm-bridge-notify.sh does, from the same settings file, with the same notices and signature,
 * for a fraction of its cost: no shell, no sha256sum, no curl for an http:// URL. slurmctld runs
 * it at every job's start and end it is configured for, so its cost is paid by every job
 * (docs/configuration.md#slurm-hooks, docs/performance.md).
 *
 *   cc -O2 -o /etc/slurm/slurm-bridge-notify slurm-bridge-notify.c     (on the slurmctld host)
 *
 * Then name it where the script was named: PrologSlurmctld/EpilogSlurmctld, or with hybrid nodes
 * the handoff script's NOTIFY. Settings: KEY=VALUE lines in /etc/slurm/slurm-bridge-notify.conf (or
 * $SLURM_BRIDGE_NOTIFY_CONF), read, never run: URL, TOKEN_FILE, PARTITIONS, TRIES, LOG, as the
 * script documents them.
 *
 * What it sends, and when, is the script's, test for test (tests/unit/slurm_hooks run both):
 *  - only slurmctld's prolog ("started") and epilog ("ended"), for a job whose working directory is
 *    /tmp (the bridge's) or unset, unless the job's comment, which the bridge sets, says the bridge
 *    needs no such notice; a start also says where and when it started and whose it is, each field
 *    only in the characters its kind of name may hold;
 *  - every notice signed: HMAC-SHA256 (RFC 2104) of its body with the secret (the token file's first
 *    line, spaces around it left out) in an X-Slurm-Bridge-Signature header; the secret itself is on
 *    no command line and never on the wire;
 *  - it exits 0 at once, always: slurmctld cancels a job whose PrologSlurmctld fails. A child in a
 *    process group of its own (slurmctld kills the hook's group once it exits) sends the notice, at
 *    most 5 s in all, each try 2 s, tried again (TRIES in all) unless the answer is a 2xx or 4xx.
 *    http:// it speaks itself; https:// it hands to curl (the header on curl's stdin). A notice that
 *    is lost costs only time: the operator's polls find the same.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* ---- SHA-256 (FIPS 180-4) ------------------------------------------------------------------ */
typedef struct {
  uint32_t h[8];
  uint64_t bytes;
  uint8_t buf[64];
  size_t used;
} sha256_ctx;

static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha256_block(sha256_ctx *c, const uint8_t *p) {
  uint32_t w[64], a, b, d, e, f, g, h, cc, t1, t2;
  int i;
  for (i = 0; i < 16; i++)
    w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
  for (; i < 64; i++) {
    uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  a = c->h[0], b = c->h[1], cc = c->h[2], d = c->h[3], e = c->h[4], f = c->h[5], g = c->h[6], h = c->h[7];
  for (i = 0; i < 64; i++) {
    t1 = h + (ROR(e, 6) ^ ROR(e, 11) ^ ROR(e, 25)) + ((e & f) ^ (~e & g)) + K256[i] + w[i];
    t2 = (ROR(a, 2) ^ ROR(a, 13) ^ ROR(a, 22)) + ((a & b) ^ (a & cc) ^ (b & cc));
    h = g, g = f, f = e, e = d + t1, d = cc, cc = b, b = a, a = t1 + t2;
  }
  c->h[0] += a, c->h[1] += b, c->h[2] += cc, c->h[3] += d, c->h[4] += e, c->h[5] += f, c->h[6] += g, c->h[7] += h;
}

static void sha256_init(sha256_ctx *c) {
  static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(c->h, iv, sizeof iv);
  c->bytes = 0, c->used = 0;
}

static void sha256_update(sha256_ctx *c, const void *data, size_t n) {
  const uint8_t *p = data;
  c->bytes += n;
  while (n > 0) {
    size_t take = 64 - c->used < n ? 64 - c->used : n;
    memcpy(c->buf + c->used, p, take);
    c->used += take, p += take, n -= take;
    if (c->used == 64) sha256_block(c, c->buf), c->used = 0;
  }
}

static void sha256_final(sha256_ctx *c, uint8_t out[32]) {
  uint64_t bits = c->bytes * 8;
  uint8_t pad = 0x80, zero = 0, len[8];
  int i;
  sha256_update(c, &pad, 1);
  while (c->used != 56) sha256_update(c, &zero, 1);
  for (i = 0; i < 8; i++) len[i] = (uint8_t)(bits >> (56 - 8 * i));
  sha256_update(c, len, 8);
  for (i = 0; i < 32; i++) out[i] = (uint8_t)(c->h[i / 4] >> (24 - 8 * (i % 4)));
}

/* HMAC-SHA256 (RFC 2104) of msg with key, as 64 hex digits into hex[65]. */
static void hmac_sha256_hex(const uint8_t *key, size_t key_len, const char *msg, size_t msg_len, char hex[65]) {
  uint8_t k[64] = {0}, pad[64], inner[32], outer[32];
  sha256_ctx c;
  int i;
  if (key_len > 64) {
    sha256_init(&c), sha256_update(&c, key, key_len), sha256_final(&c, k);
  } else {
    memcpy(k, key, key_len);
  }
  for (i = 0; i < 64; i++) pad[i] = k[i] ^ 0x36;
  sha256_init(&c), sha256_update(&c, pad, 64), sha256_update(&c, msg, msg_len), sha256_final(&c, inner);
  for (i = 0; i < 64; i++) pad[i] = k[i] ^ 0x5c;
  sha256_init(&c), sha256_update(&c, pad, 64), sha256_update(&c, inner, 32), sha256_final(&c, outer);
  for (i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", outer[i]);
}

/* ---- what slurmctld gives the hook ----------------------------------------------------------- */
static const char *env(const char *name) {
  const char *v = getenv(name);
  return v ? v : "";
}

/* s is non-empty and every byte is in allowed (ranges written out) */
static int only(const char *s, const char *allowed) {
  if (!*s) return 0;
  for (; *s; s++)
    if (!strchr(allowed, *s)) return 0;
  return 1;
}

#define DIGITS "0123456789"
#define ALNUM "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" DIGITS
static int is_hostlist(const char *s) { return only(s, ALNUM "[]._,-"); }
static int is_name(const char *s) { return only(s, ALNUM "._@-"); }
static int is_epoch(const char *s) { return only(s, DIGITS) && s[0] != '0'; }          /* [1-9][0-9]* */
static int is_id(const char *s) {                                                       /* 0|[1-9][0-9]{0,9} */
  return only(s, DIGITS) && (strcmp(s, "0") == 0 || (s[0] != '0' && strlen(s) <= 10));
}

/* ---- its settings ---------------------------------------------------------------------------- */
static char url[4096], token_file[4096] = "/etc/slurm/slurm-bridge-hook.token", partitions[4096];
static char log_file[4096] = "/var/log/slurm-bridge/notify.log";
static int tries = 3;

/* KEY=VALUE lines; a value ends at '#' and keeps no whitespace (the script's reading) */
static void read_conf(FILE *f) {
  char line[8192];
  while (fgets(line, sizeof line, f)) {
    char *eq = strchr(line, '='), *value, *out, *in;
    char *slot = NULL;
    if (!eq) continue;
    *eq = '\0', value = eq + 1;
    value[strcspn(value, "#")] = '\0';
    for (in = out = value; *in; in++)
      if (!strchr(" \t\n\r\v\f", *in)) *out++ = *in;
    *out = '\0';
    if (strcmp(line, "URL") == 0) slot = url;
    else if (strcmp(line, "TOKEN_FILE") == 0) slot = token_file;
    else if (strcmp(line, "PARTITIONS") == 0) slot = partitions;
    else if (strcmp(line, "LOG") == 0) slot = log_file;
    else if (strcmp(line, "TRIES") == 0) tries = (strlen(value) == 1 && value[0] >= '1' && value[0] <= '9') ? value[0] - '0' : 3;
    if (slot) snprintf(slot, 4096, "%s", value);
  }
}

/* the secret: the token file's first line, spaces around it left out; 0 when there is none */
static size_t read_secret(uint8_t *key, size_t size) {
  int fd = open(token_file, O_RDONLY | O_CLOEXEC);
  size_t n = 0, start = 0;
  ssize_t got;
  if (fd < 0) return 0;
  while (n < size && (got = read(fd, key + n, size - n)) > 0) n += (size_t)got;
  close(fd);
  for (size_t i = 0; i < n; i++)
    if (key[i] == '\n') { n = i; break; }
  while (start < n && strchr(" \t\r\v\f", key[start])) start++;
  while (n > start && strchr(" \t\r\v\f", key[n - 1])) n--;
  memmove(key, key + start, n - start);
  return n - start;
}

/* why nothing was sent, on stderr and in LOG (when its directory is writable) */
static void say(const char *job, const char *event, const char *why) {
  char dir[4096];
  char *slash;
  fprintf(stderr, "slurm-bridge-notify: job %s %s: not sent: %s (docs/configuration.md#slurm-hooks)\n", job, event, why);
  snprintf(dir, sizeof dir, "%s", log_file);
  slash = strrchr(dir, '/');
  if (!*log_file || !slash) return;
  *slash = '\0';
  if (access(*dir ? dir : "/", W_OK) == 0) {
    FILE *log = fopen(log_file, "a");
    char stamp[32];
    time_t now = time(NULL);
    if (!log) return;
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", localtime(&now));
    fprintf(log, "%s slurm-bridge-notify: job %s %s: not sent: %s (docs/configuration.md#slurm-hooks)\n", stamp, job,
            event, why);
    fclose(log);
  }
}

/* ---- the sender ------------------------------------------------------------------------------ */
/* one POST over a new connection; the answer's status, or 0 when there was none */
static int post_once(const char *host, const char *port, const char *path, const char *auth, const char *body) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *found, *a;
  struct timeval two = {.tv_sec = 2};
  char *request = NULL, answer[64];
  int fd = -1, status = 0, len;
  size_t sent = 0, got = 0;
  if (getaddrinfo(host, port, &hints, &found) != 0) return 0;
  for (a = found; a; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &two, sizeof two); /* Linux bounds connect by it too */
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &two, sizeof two);
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) break;
    close(fd), fd = -1;
  }
  freeaddrinfo(found);
  if (fd < 0) return 0;
  len = asprintf(&request,
                 "POST /%s HTTP/1.1\r\nHost: %s\r\n%s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                 "Connection: close\r\n\r\n%s",
                 path, host, auth, strlen(body), body);
  while (len > 0 && sent < (size_t)len) {
    ssize_t n = send(fd, request + sent, (size_t)len - sent, MSG_NOSIGNAL); /* a closed peer: tried again */
    if (n <= 0) break;
    sent += (size_t)n;
  }
  if (len > 0 && sent == (size_t)len) {
    while (got < sizeof answer - 1) {
      ssize_t n = read(fd, answer + got, sizeof answer - 1 - got);
      if (n <= 0) break;
      got += (size_t)n;
      if (memchr(answer, '\n', got)) break;
    }
    answer[got] = '\0';
    if (strncmp(answer, "HTTP/1.", 7) == 0 && answer[8] == ' ') status = atoi(answer + 9);
  }
  free(request);
  close(fd);
  return status;
}

/* http://HOST[:PORT][/PATH] into its parts, in place (PATH without its leading '/'); 0 when the URL
 * is not of that form */
static int split_url(char *rest, char **host, char **port, char **path) {
  static char eighty[] = "80", none[] = "";
  char *p;
  *host = rest, *port = eighty, *path = none;
  p = rest + strcspn(rest, ":/");
  if (p == rest) return 0;
  if (*p == ':') {
    *p++ = '\0', *port = p;
    p += strspn(p, DIGITS);
    if (p == *port || (*p && *p != '/')) return 0;
  }
  if (*p == '/') *p = '\0', *path = p + 1;
  return 1;
}

static void send_notice(const char *auth, const char *body) {
  char *host, *port, *path;
  if (strncmp(url, "http://", 7) == 0) {
    struct timespec pause = {.tv_nsec = 100000000};
    if (!split_url(url + 7, &host, &port, &path)) return;
    for (int i = 1; i <= tries; i++) {
      int status = post_once(host, port, path, auth, body);
      if (status / 100 == 2 || status / 100 == 4) return; /* a wrong secret is not tried again */
      if (i < tries) nanosleep(&pause, NULL);
    }
    return;
  }
  /* https: curl, the header (the signature) on its stdin */
  int pipe_fds[2];
  char retries[12], header[160];
  if (pipe(pipe_fds) != 0) return;
  snprintf(header, sizeof header, "%s\n", auth);
  if (write(pipe_fds[1], header, strlen(header)) != (ssize_t)strlen(header)) return;
  close(pipe_fds[1]);
  dup2(pipe_fds[0], 0);
  snprintf(retries, sizeof retries, "%d", tries - 1);
  execlp("curl", "curl", "-s", "-o", "/dev/null", "-m", "2", "--retry", retries, "--retry-delay", "0", "-X", "POST",
         "-H", "@-", "-H", "Content-Type: application/json", "--data", body, url, (char *)NULL);
}

static int on_path(const char *program) {
  const char *path = getenv("PATH");
  char dir[4096];
  while (path && *path) {
    size_t n = strcspn(path, ":");
    snprintf(dir, sizeof dir, "%.*s/%s", (int)n, path, program);
    if (n && access(dir, X_OK) == 0) return 1;
    path += n + (path[n] == ':');
  }
  return 0;
}

int main(void) {
  const char *context = env("SLURM_SCRIPT_CONTEXT"), *job = env("SLURM_JOB_ID"), *comment = env("SLURM_JOB_COMMENT");
  const char *work_dir = env("SLURM_JOB_WORK_DIR"), *conf = env("SLURM_BRIDGE_NOTIFY_CONF"), *event;
  char *body = NULL, auth[128], hex[65];
  uint8_t key[65536];
  size_t key_len, body_len = 0;
  FILE *f;
  pid_t pid;

  if (strcmp(context, "prolog_slurmctld") == 0) event = "started";
  else if (strcmp(context, "epilog_slurmctld") == 0) event = "ended";
  else return 0;
  if (!only(job, DIGITS)) return 0;
  /* only the bridge's jobs: their working directory is /tmp (slurm_bridge/slurm/bodies.py); unset: told */
  if (*work_dir && strcmp(work_dir, "/tmp") != 0) return 0;
  /* what the bridge asks to be told of the job, in its comment (slurm_bridge/names/slurm.py) */
  if (strncmp(comment, "slurm-bridge:", 13) == 0) {
    if (strstr(comment, "\"notify\":\"none\"")) return 0;
    if (strstr(comment, "\"notify\":\"ended\"") && strcmp(event, "ended") != 0) return 0;
  }
  if (!*conf) conf = "/etc/slurm/slurm-bridge-notify.conf";
  if (!(f = fopen(conf, "re"))) return 0;
  read_conf(f);
  fclose(f);
  if (!*url || access(token_file, R_OK) != 0) return 0;
  if (*partitions) { /* only these partitions: ",PARTITIONS," holds ",partition," */
    char listed[4100], wanted[4100];
    snprintf(listed, sizeof listed, ",%s,", partitions);
    snprintf(wanted, sizeof wanted, ",%.4090s,", env("SLURM_JOB_PARTITION"));
    if (!strstr(listed, wanted)) return 0;
  }
  if (strncmp(url, "http://", 7) != 0) {
    if (strncmp(url, "https://", 8) != 0) return 0;
    if (!on_path("curl")) {
      say(job, event, "the URL is https:// and curl is not on PATH to send it");
      return 0;
    }
  }

  time_t now = time(NULL);
  f = open_memstream(&body, &body_len);
  if (!f) return 0;
  fprintf(f, "{\"event\":\"%s\",\"jobId\":%s,\"time\":%lld", event, job, (long long)now);
  const char *nodes = env("SLURM_JOB_NODELIST"), *partition = env("SLURM_JOB_PARTITION");
  if (strcmp(event, "started") == 0 && is_hostlist(nodes) && is_name(partition)) {
    const char *start = env("SLURM_JOB_START_TIME"), *end = env("SLURM_JOB_END_TIME");
    if (is_epoch(start)) fprintf(f, ",\"nodes\":\"%s\",\"partition\":\"%s\",\"startTime\":%s", nodes, partition, start);
    else fprintf(f, ",\"nodes\":\"%s\",\"partition\":\"%s\",\"startTime\":%lld", nodes, partition, (long long)now);
    if (is_epoch(end)) fprintf(f, ",\"endTime\":%s", end);
    const char *user = env("SLURM_JOB_USER"), *uid = env("SLURM_JOB_UID"), *gid = env("SLURM_JOB_GID");
    const char *group = env("SLURM_JOB_GROUP"), *account = env("SLURM_JOB_ACCOUNT"), *qos = env("SLURM_JOB_QOS");
    if (is_name(user) && is_id(uid) && is_id(gid) && is_name(group) && is_name(account) && is_name(qos))
      fprintf(f, ",\"user\":\"%s\",\"uid\":%s,\"group\":\"%s\",\"gid\":%s,\"account\":\"%s\",\"qos\":\"%s\"", user,
              uid, group, gid, account, qos);
  }
  fputc('}', f);
  if (fclose(f) != 0) return 0;

  /* The sender: a child in a process group of its own from before this process exits (the
   * parent moves it too, so neither order of the two calls leaves it in slurmctld's reach). */
  fflush(NULL);
  pid = fork();
  if (pid != 0) {
    if (pid > 0) setpgid(pid, pid);
    return 0;
  }
  setpgid(0, 0);
  int null = open("/dev/null", O_RDWR);
  if (null >= 0) dup2(null, 0), dup2(null, 1), dup2(null, 2);
  alarm(5); /* at most 5 s in all, curl included (an alarm outlives exec) */
  key_len = read_secret(key, sizeof key);
  if (key_len == 0) _exit(0); /* nothing is sent that could not be authenticated */
  hmac_sha256_hex(key, key_len, body, strlen(body), hex);
  memset(key, 0, sizeof key);
  snprintf(auth, sizeof auth, "X-Slurm-Bridge-Signature: sha256=%s", hex);
  send_notice(auth, body);
  _exit(0);
}
