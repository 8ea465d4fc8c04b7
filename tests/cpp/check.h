// The CPU checks' one assertion: a failed CHECK prints where and exits 1 (the
// pytest wrapper then shows the program's output).
#pragma once

#include <cstdio>
#include <cstdlib>

#define CHECK(condition)                                                        \
  do {                                                                          \
    if (!(condition)) {                                                         \
      std::printf("FAILED %s:%d: %s\n", __FILE__, __LINE__, #condition);        \
      std::exit(1);                                                             \
    }                                                                           \
  } while (0)
