// GPU-free test of the injection library's export boundary (adapters/cuda/src/inject/boundary.hpp), the wrapper
// that every kreplay_inject_* export and InitializeInjection runs its body in: an exception thrown inside comes
// back as the export's failure value, with one line on stderr naming the export.
#include <cstdio>
#include <new>
#include <stdexcept>
#include <string>

#include "boundary.hpp"
#include "fakes.hpp"

using namespace kreplay::cuda::inject;
using fake::stderr_of;

namespace {

size_t lines(const std::string& text) {
  size_t count = 0;
  for (char c : text) {
    count += c == '\n' ? 1 : 0;
  }
  return count;
}

// An export as injection.cpp writes one.
kreplay_status_t export_that_throws(int what) {
  return guarded(__func__, [&] {
    if (what == 1) {
      throw std::runtime_error("the tracker's table is broken");
    }
    if (what == 2) {
      throw std::bad_alloc();
    }
    if (what == 3) {
      throw 42;
    }
    return KREPLAY_STATUS_NOT_FOUND;  // what the body answers when nothing is thrown
  });
}

void an_exception_comes_back_as_the_failure_value_with_one_line() {
  kreplay_status_t status = KREPLAY_STATUS_SUCCESS;
  std::string said = stderr_of([&] { status = export_that_throws(1); });
  CHECK(status == KREPLAY_STATUS_INTERNAL_ERROR);
  CHECK(lines(said) == 1);
  CHECK(said == "kreplay-inject: export_that_throws failed: the tracker's table is broken\n");
  said = stderr_of([&] { status = export_that_throws(3); });
  CHECK(status == KREPLAY_STATUS_INTERNAL_ERROR && lines(said) == 1);
  CHECK(said.find("not a std::exception") != std::string::npos);
}

void out_of_memory_is_its_own_status() {
  kreplay_status_t status = KREPLAY_STATUS_SUCCESS;
  const std::string said = stderr_of([&] { status = export_that_throws(2); });
  CHECK(status == KREPLAY_STATUS_OUT_OF_HOST_MEMORY && lines(said) == 1);
}

void a_body_that_does_not_throw_answers_for_itself() {
  kreplay_status_t status = KREPLAY_STATUS_SUCCESS;
  const std::string said = stderr_of([&] { status = export_that_throws(0); });
  CHECK(status == KREPLAY_STATUS_NOT_FOUND);  // control: not the failure value
  CHECK(said.empty());
}

void an_export_of_another_type_names_its_failure_value() {
  // InitializeInjection's form: 1 whatever happens.
  int answer = 0;
  stderr_of([&] { answer = guarded_with("InitializeInjection", 1, 1, []() -> int { throw std::logic_error("x"); }); });
  CHECK(answer == 1);
  CHECK(guarded_with("f", -1, -2, [] { return 7; }) == 7);
  stderr_of([&] { answer = guarded_with("f", -1, -2, []() -> int { throw std::bad_alloc(); }); });
  CHECK(answer == -2);
}

}  // namespace

int main() {
  RUN_TEST(an_exception_comes_back_as_the_failure_value_with_one_line);
  RUN_TEST(out_of_memory_is_its_own_status);
  RUN_TEST(a_body_that_does_not_throw_answers_for_itself);
  RUN_TEST(an_export_of_another_type_names_its_failure_value);
  return 0;
}
