/* Entry points that LLVM's ThreadSanitizer instrumentation (rustc -Zsanitizer=thread) emits and GCC 12's
 * libtsan does not provide. Each forwards to the libc function, which libtsan intercepts, so the access is
 * still checked. Weak, so that a libtsan that has them wins. */
#include <stddef.h>
#include <string.h>

__attribute__((weak)) void* __tsan_memcpy(void* dst, const void* src, size_t n) { return memcpy(dst, src, n); }
__attribute__((weak)) void* __tsan_memmove(void* dst, const void* src, size_t n) { return memmove(dst, src, n); }
__attribute__((weak)) void* __tsan_memset(void* dst, int value, size_t n) { return memset(dst, value, n); }
