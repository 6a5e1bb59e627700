// Host buffers for the large pools a model reads on every step (the paged KV cache): 2 MiB
// aligned and advised for transparent huge pages, so that streaming through gigabytes of keys and
// values takes one TLB entry per 2 MiB instead of per 4 KiB. Linux honours the advice when
// /sys/kernel/mm/transparent_hugepage/enabled is `always` or `madvise` (the common default);
// elsewhere the buffer is ordinary memory.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>

namespace laminar {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// `count` zeroed floats (at least one), 2 MiB aligned, madvise(MADV_HUGEPAGE)d when the buffer
// spans 2 MiB or more. CHECK-fails when the memory cannot be had.
std::unique_ptr<float[], FreeDeleter> AllocateHugePageFloats(size_t count);

}  // namespace laminar
