// CheckFailure: prints the failed invariant and aborts.
#include "core/check.h"

#include <cstdio>
#include <cstdlib>

namespace laminar::internal {

CheckFailure::CheckFailure(const char* file, int line, const char* condition) {
  stream_ << "CHECK failed at " << file << ":" << line << ": " << condition << " ";
}

CheckFailure::~CheckFailure() {
  std::fprintf(stderr, "%s\n", stream_.str().c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace laminar::internal
