// LAMINAR_CHECK: broken invariants (bugs) abort with file:line and a streamed message.
// Use Status for anything a user, a file or a peer can cause.
#pragma once

#include <sstream>

namespace laminar::internal {

// Collects the message; aborts in its destructor. Never used for recoverable errors.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  [[noreturn]] ~CheckFailure();
  CheckFailure(const CheckFailure&) = delete;
  CheckFailure& operator=(const CheckFailure&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

// Lets `cond ? (void)0 : Voidify() & stream << x` type-check.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace laminar::internal

#define LAMINAR_CHECK(cond)                 \
  (cond) ? (void)0                          \
         : ::laminar::internal::Voidify() & \
               ::laminar::internal::CheckFailure(__FILE__, __LINE__, #cond).stream()

#define LAMINAR_CHECK_OP(a, op, b) \
  LAMINAR_CHECK((a)op(b)) << "(" << (a) << " " #op " " << (b) << ") "
#define LAMINAR_CHECK_EQ(a, b) LAMINAR_CHECK_OP(a, ==, b)
#define LAMINAR_CHECK_NE(a, b) LAMINAR_CHECK_OP(a, !=, b)
#define LAMINAR_CHECK_LT(a, b) LAMINAR_CHECK_OP(a, <, b)
#define LAMINAR_CHECK_LE(a, b) LAMINAR_CHECK_OP(a, <=, b)
#define LAMINAR_CHECK_GT(a, b) LAMINAR_CHECK_OP(a, >, b)
#define LAMINAR_CHECK_GE(a, b) LAMINAR_CHECK_OP(a, >=, b)
// Aborts if a Status-returning expression fails (for code paths where failure is a bug).
#define LAMINAR_CHECK_OK(expr)                                  \
  do {                                                          \
    auto _laminar_check_st = (expr);                            \
    LAMINAR_CHECK(_laminar_check_st.ok()) << _laminar_check_st; \
  } while (0)
