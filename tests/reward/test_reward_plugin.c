/* A reward plug-in for c_reward_test, compiled as C (so that it also checks that
 * reward/laminar_reward_plugin.h is pure C): scores 1 when the response equals the ground truth,
 * else 0; the ground truth "fail" is an error, "nan" a non-finite score. Built twice: the
 * test_reward_plugin_old_abi target defines TEST_PLUGIN_ABI_VERSION to another version. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "reward/laminar_reward_plugin.h"

#ifndef TEST_PLUGIN_ABI_VERSION
#define TEST_PLUGIN_ABI_VERSION LAMINAR_REWARD_ABI_VERSION
#endif

int laminar_reward_abi_version(void) { return TEST_PLUGIN_ABI_VERSION; }

int laminar_compute_score(const laminar_reward_input* in, double* score, char* error,
                          size_t error_size) {
  if (strcmp(in->ground_truth, "fail") == 0) {
    snprintf(error, error_size, "cannot score %zu bytes from %s", in->solution_str_size,
             in->data_source);
    return 7;
  }
  if (strcmp(in->ground_truth, "nan") == 0) {
    *score = NAN;
    return 0;
  }
  *score = in->solution_str_size == in->ground_truth_size &&
                   memcmp(in->solution_str, in->ground_truth, in->solution_str_size) == 0
               ? 1.0
               : 0.0;
  return 0;
}

/* Another name for the same function, for the `symbol` param; it scores the length of
 * extra_info_json, to check that it arrives. */
int extra_info_length(const laminar_reward_input* in, double* score, char* error,
                      size_t error_size) {
  (void)error;
  (void)error_size;
  *score = (double)in->extra_info_json_size + (in->extra_info_json[in->extra_info_json_size] == '\0' ? 0.0 : 0.5);
  return 0;
}

/* Misbehaving plug-ins for the sandbox: the ground truth "crash" dereferences a null pointer,
 * "hang" never returns, "spin" burns CPU forever, "print" writes to stdout before scoring 1. */
int misbehave(const laminar_reward_input* in, double* score, char* error, size_t error_size) {
  (void)error;
  (void)error_size;
  if (strcmp(in->ground_truth, "crash") == 0) {
    volatile int* volatile nowhere = NULL;
    *score = *nowhere;
  }
  if (strcmp(in->ground_truth, "hang") == 0) {
    for (;;) sleep(1);
  }
  if (strcmp(in->ground_truth, "spin") == 0) {
    for (volatile unsigned long i = 0;; ++i) {
    }
  }
  if (strcmp(in->ground_truth, "print") == 0) {
    printf("{\"score\": 99}\n");
    fflush(stdout);
  }
  *score = 1.0;
  return 0;
}

/* What the sandbox left this worker: the ground truth "files" scores its open-file limit, "core"
 * its core-dump limit, anything else is a port on 127.0.0.1: 1 when a connection to it succeeds. */
int sandbox_probe(const laminar_reward_input* in, double* score, char* error, size_t error_size) {
  (void)error;
  (void)error_size;
  struct rlimit limit;
  if (strcmp(in->ground_truth, "files") == 0 || strcmp(in->ground_truth, "core") == 0) {
    getrlimit(strcmp(in->ground_truth, "files") == 0 ? RLIMIT_NOFILE : RLIMIT_CORE, &limit);
    *score = (double)limit.rlim_cur;
    return 0;
  }
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof(addr));
  addr.sin_family = AF_INET;
  addr.sin_port = htons((unsigned short)atoi(in->ground_truth));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  *score = fd >= 0 && connect(fd, (struct sockaddr*)&addr, sizeof(addr)) == 0 ? 1.0 : 0.0;
  if (fd >= 0) close(fd);
  return 0;
}
