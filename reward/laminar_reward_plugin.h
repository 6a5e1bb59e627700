/* The C ABI of laminar's reward plug-ins: a shared library that defines the two functions below
 * (compiled as C or C++, exported with C linkage) can be named in a recipe as
 *   reward: {c: {path: libmy_reward.so, symbol: laminar_compute_score}}
 * and is loaded with dlopen(RTLD_NOW | RTLD_LOCAL) (reward/c_reward.h). This header is
 * self-contained pure C (C99 or C++); copy it into a plug-in's sources.
 *
 * The arguments are verl's compute_score(data_source, solution_str, ground_truth, extra_info)
 * (verl/utils/reward_score/__init__.py). Build: cc -O2 -shared -fPIC my_reward.c -o libmy_reward.so
 */
#ifndef LAMINAR_REWARD_PLUGIN_H_
#define LAMINAR_REWARD_PLUGIN_H_

#include <stddef.h>

/* Bumped whenever a struct or signature below changes; laminar refuses a plug-in built against
 * another version. */
#define LAMINAR_REWARD_ABI_VERSION 1

#ifdef __cplusplus
extern "C" {
#endif

/* One finished response to score. Every string is NUL-terminated and also has its length in bytes
 * (not counting the NUL; a string may hold NUL bytes, and is not guaranteed to be valid UTF-8).
 * laminar owns the memory; it is valid only during the call: copy what you keep. */
typedef struct laminar_reward_input {
  const char* data_source; /* the dataset a prompt came from, e.g. "openai/gsm8k" */
  size_t data_source_size;
  const char* solution_str; /* the decoded response text */
  size_t solution_str_size;
  const char* ground_truth; /* the dataset's reference answer (JSON text when structured) */
  size_t ground_truth_size;
  const char* extra_info_json; /* a JSON object of the row's other fields, or "" */
  size_t extra_info_json_size;
} laminar_reward_input;

/* Must return LAMINAR_REWARD_ABI_VERSION as compiled into the plug-in. Required. */
int laminar_reward_abi_version(void);

/* Scores `in`: on success stores a finite score in *score and returns 0. On failure returns
 * nonzero and writes a NUL-terminated message of at most error_size bytes (including the NUL) to
 * `error`; laminar then gives the sample `reward.failure_score` and counts reward/error_count.
 * A non-finite score is also counted as an error.
 *
 * Where it runs: in sandboxed worker processes (laminar-reward-host, reward/worker_pool.h), one
 * call at a time per process, with a deadline and CPU, memory and open-file limits and no network
 * unless the recipe asks: a call that hangs, crashes or runs past a limit costs that sample only.
 * It must not throw C++ exceptions across this boundary. Keep it reentrant all the same (no
 * unsynchronised mutable globals): a future host may call it from several threads.
 *
 * A plug-in may export this function under another name and have the recipe name it in `symbol`;
 * it must have exactly this signature. */
int laminar_compute_score(const laminar_reward_input* in, double* score, char* error,
                          size_t error_size);

/* The type of the scoring function, for dlsym. */
typedef int (*laminar_compute_score_fn)(const laminar_reward_input* in, double* score, char* error,
                                        size_t error_size);
typedef int (*laminar_reward_abi_version_fn)(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* LAMINAR_REWARD_PLUGIN_H_ */
