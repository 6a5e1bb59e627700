/* A reward plug-in for c_reward_test, compiled as C (so that it also checks that
 * reward/laminar_reward_plugin.h is pure C): scores 1 when the response equals the ground truth,
 * else 0; the ground truth "fail" is an error, "nan" a non-finite score. Built twice: the
 * test_reward_plugin_old_abi target defines TEST_PLUGIN_ABI_VERSION to another version. */
#include <math.h>
#include <stdio.h>
#include <string.h>

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
