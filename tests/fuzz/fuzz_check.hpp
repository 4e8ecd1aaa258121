// A failed property in a fuzz target: say which and abort, so that libFuzzer records the input.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#define HCR_FUZZ_CHECK(cond, what)                                                                \
  do {                                                                                            \
    if (!(cond)) {                                                                                \
      std::fprintf(stderr, "fuzz property failed: %s (%s) at %s:%d\n", std::string(what).c_str(), \
                   #cond, __FILE__, __LINE__);                                                    \
      std::abort();                                                                               \
    }                                                                                             \
  } while (0)
