// The emulation programs' check: a failed one is printed and counted.
#pragma once
#include <cstdio>

namespace emu {
inline int failures = 0;

inline void expect(bool ok, const char* what, double got = 0, double limit = 0) {
  if (!ok) {
    std::printf("FAIL %s (%g, limit %g)\n", what, got, limit);
    ++failures;
  }
}
}  // namespace emu
