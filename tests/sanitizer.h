// Whether this test binary is built under AddressSanitizer or ThreadSanitizer (make test's
// sanitizer runs, scripts/sanitize.sh): tests that measure memory or run long model-level loops
// adapt to it. Test code only.
#pragma once

namespace tinyserve::testing_util {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kUnderSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kUnderSanitizer = true;
#else
inline constexpr bool kUnderSanitizer = false;
#endif
#else
inline constexpr bool kUnderSanitizer = false;
#endif

}  // namespace tinyserve::testing_util
