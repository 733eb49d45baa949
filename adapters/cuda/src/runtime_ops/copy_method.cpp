// The copy methods' names (kreplay/cuda.hpp), apart from copy.cpp so that tests without CUDA can link them.
#include <cstring>
#include <initializer_list>

#include "kreplay/cuda.hpp"

namespace kreplay::cuda {

const char* copy_method_name(copy_method method) {
  switch (method) {
    case copy_method::automatic: return "automatic";
    case copy_method::kernel: return "kernel";
    case copy_method::memcpy_batch: return "memcpy_batch";
    case copy_method::memcpy_async: return "memcpy_async";
  }
  return "?";
}

bool copy_method_from_name(const char* name, copy_method* method_out) {
  if (name == nullptr || method_out == nullptr) {
    return false;
  }
  for (copy_method method :
       {copy_method::automatic, copy_method::kernel, copy_method::memcpy_batch, copy_method::memcpy_async}) {
    if (std::strcmp(name, copy_method_name(method)) == 0) {
      *method_out = method;
      return true;
    }
  }
  return false;
}

}  // namespace kreplay::cuda
