// Functions of a library found at run time (the driver, CUPTI, CUPTI's Checkpoint API): never linked, so that
// the injection pulls no second copy of them into the host.
#ifndef KREPLAY_CUDA_INJECT_SYMBOLS_HPP
#define KREPLAY_CUDA_INJECT_SYMBOLS_HPP

#include <dlfcn.h>

namespace kreplay::cuda::inject {

// `out` = the function `name` of `library` (a dlopen handle), null when it has none; true when found.
template <typename F>
bool find_symbol(void* library, const char* name, F& out) {
  // dlsym returns the address of the function named `name`, whose prototype the vendor's header declares; F is
  // that prototype, so the conversion is the one POSIX documents for dlsym.
  out = reinterpret_cast<F>(dlsym(library, name));
  return out != nullptr;
}

}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_SYMBOLS_HPP
