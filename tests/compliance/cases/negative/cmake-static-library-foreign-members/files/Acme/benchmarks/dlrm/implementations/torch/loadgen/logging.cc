#include <cstdio>

void log_line(const char* what, long value) {
  std::fprintf(stderr, "%s: %ld\n", what, value);
}
