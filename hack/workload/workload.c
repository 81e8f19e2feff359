/* The local cluster's test workload (hack/image.sh archive workload): a container that runs until
 * SIGTERM and then keeps running for a while, as a real application finishing its work does in its
 * grace period. The handoff's tests (tests/e2e/test_handoff.py) watch native Slurm work wait for it.
 *
 *   workload [LINGER]   on SIGTERM (or SIGINT), go on for LINGER seconds (default 10), then exit 0
 *
 * Static and tiny, like the pause image: the real node has no registry to pull a shell image from. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile sig_atomic_t stopping;

static void on_signal(int sig) { (void)sig; stopping = 1; }

int main(int argc, char **argv) {
  int linger = argc > 1 ? atoi(argv[1]) : 10;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  setvbuf(stdout, NULL, _IONBF, 0);
  printf("workload: running; on SIGTERM it goes on for %d s\n", linger);
  while (!stopping) {
    struct timespec tick = {1, 0};
    nanosleep(&tick, NULL);
  }
  printf("workload: SIGTERM, stopping in %d s\n", linger);
  struct timespec left = {linger, 0};
  while (nanosleep(&left, &left) != 0) {
  }
  printf("workload: stopped\n");
  return 0;
}
