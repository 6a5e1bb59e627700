// Huge-page-advised host buffers.
#include "core/huge_pages.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>

#include "core/check.h"

namespace laminar {

std::unique_ptr<float[], FreeDeleter> AllocateHugePageFloats(size_t count) {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t bytes = (std::max<size_t>(count, 1) * sizeof(float) + kHuge - 1) / kHuge * kHuge;
  void* p = std::aligned_alloc(kHuge, bytes);
  LAMINAR_CHECK(p != nullptr) << "out of memory allocating " << bytes << " bytes";
  // Advice only: without transparent huge pages the kernel ignores it, and the memory still works.
  (void)madvise(p, bytes, MADV_HUGEPAGE);
  std::memset(p, 0, bytes);
  return std::unique_ptr<float[], FreeDeleter>(static_cast<float*>(p));
}

}  // namespace laminar
